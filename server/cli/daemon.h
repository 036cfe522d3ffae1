/* daemon: `tensord serve` — scan, serve, reload on SIGHUP/inotify, drain on SIGTERM. */
#ifndef TENSORD_DAEMON_H
#define TENSORD_DAEMON_H

#include "config.h"

/* Runs until SIGINT/SIGTERM. Returns the process exit code: 0 after a clean
 * stop, 2 when it could not start (tensord(8), EXIT STATUS). */
int daemon_run(const struct config *cfg);

#endif
