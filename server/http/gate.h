/* gate: a body that reads mirrored files whose bytes may still be arriving
 * (a mirror's answers: a Hub file, a mirrored model's file, tensor, slice
 * or fetch; server/handlers/h_mirror.c), part of the HTTP front
 * (server/http/stream.c is its one user).
 *
 * The body says which bytes of which file each of its bytes is
 * (body_each_span: a contiguous span, a slice's runs, a fetch plan's
 * tensors); the gate lets the reader produce only the body bytes whose
 * file bytes the mirror has (mirror_readable), and otherwise names the
 * file byte to wait for (mirror_wait). At the start it asks the mirror for
 * every block the answer sends (mirror_want), and counts them as hits
 * (in the cache already) or misses. So every body, whatever its shape,
 * reads a mirrored file the same way whether its bytes are cached or
 * still arriving, and asks for the blocks it sends and no others.
 *
 * The gate holds its own reference to each file that is not complete
 * (the answer's may go first), and at most one waiter. One thread at a
 * time (the connection's). */
#ifndef TENSORD_GATE_H
#define TENSORD_GATE_H

#include <stdint.h>

#include "body.h"
#include "h_answer.h"

struct gate;
struct mirror;

/* A gate over the files rd[0..n) of mirror m that are not complete, or
 * NULL when all are (nothing to wait for). Files read through descriptor
 * body_fd are read through body_dup instead (the reader's duplicate of a
 * plain body's descriptor). */
struct gate *gate_new(struct mirror *m, const struct mirror_read *rd, size_t n, int body_fd,
                      int body_dup);
/* Drops the waiter (waiting out a callback that runs) and the references. */
void gate_free(struct gate *g);

/* How far ahead a reader asks the mirror what is readable, so that a
 * slice of many short runs asks once per window, not once per run. */
#define GATE_AHEAD (16u << 20)

/* Asks mirror m for the blocks of body bytes from off (at most len) that
 * g's files hold, and counts them as hits or misses. A body of very many
 * spans (a slice of tiny runs) is asked for a window at a time: returns
 * the body offset it got to (off + len when all), from which the reader
 * asks again as it reads (GATE_AHEAD before it gets there). g may be NULL
 * (every file complete: all hits, nothing asked). */
uint64_t gate_want(struct mirror *m, struct gate *g, const struct body *b, uint64_t off,
                   uint64_t len);

/* The body bytes from off (at most n) that can be read now: n when all,
 * fewer when a file's bytes stop short of them (0: none; gate_wait then
 * waits for the first missing one), -1 when the mirror's download of one
 * failed. */
int64_t gate_avail(struct gate *g, const struct body *b, uint64_t off, uint64_t n);

/* After gate_avail answered 0: registers cb(arg) to be called (once, on
 * a fetcher thread, no lock held) when the first missing byte is readable
 * or the download failed, the fetchers moved to it. Returns 1 when that is
 * so already (cb is not registered: read again), 0 when registered. */
int gate_wait(struct gate *g, void (*cb)(void *arg), void *arg);

#endif
