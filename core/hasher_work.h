/* hasher_work: the hasher's threads (design in hasher.h), on its job table
 * (hasher_jobs.h): worker threads that hash the queued jobs, the
 * housekeeper (retries, waiters' deadlines, asking for saves) and the saver
 * (writes the state file, only trying its lock). Started and stopped by
 * hasher.c; they call the job table and nothing above it. */
#ifndef TENSORD_HASHER_WORK_H
#define TENSORD_HASHER_WORK_H

#include "hasher_jobs.h"
#include "st_error.h"

/* Starts h's n_workers workers, the housekeeper and the saver. Returns 0,
 * or -errno with err when a thread cannot start (those started are stopped
 * and joined again). */
int hasher_work_start(struct hasher *h, struct st_error *err);
/* After h->stopping is set: joins the workers (they stop at their next
 * block) and the housekeeper within HASHER_STOP_MS; one that has not ended
 * by then is left to itself and counted in h->threads_left. */
void hasher_work_join(struct hasher *h);
/* Asks the saver for the last save, which gives up on a locked directory
 * after HASHER_SAVE_WAIT_MS, and joins it within HASHER_STUCK_MS more. */
void hasher_work_last_save(struct hasher *h);

#endif
