/* daemon: `tensord serve` — scan, serve, reload on SIGHUP/inotify, drain on SIGTERM. */
#ifndef TENSORD_DAEMON_H
#define TENSORD_DAEMON_H

#include "config.h"

/* Runs until SIGINT/SIGTERM. Returns the process exit code. */
int daemon_run(const struct config *cfg);

#endif
