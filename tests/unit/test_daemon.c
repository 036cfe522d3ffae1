/* Unit tests for server/cli/daemon.c: `tensord serve` run in a child process
 * of the test: it scans, becomes ready, serves, rescans when a model is
 * added (inotify, debounced) and on SIGHUP, and drains and exits 0 on
 * SIGTERM. */
#include <signal.h>
#include <sys/wait.h>

#include "daemon.h"
#include "log.h"
#include "loopback.h"

static char root[64], work[64];

static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

/* GET target's status (0 when nothing answers) and body. */
static unsigned get(unsigned port, const char *target, char **body)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    unsigned status = 0;
    *body = NULL;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        char *req = xasprintf("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", target);
        if (send(fd, req, strlen(req), MSG_NOSIGNAL) > 0) {
            size_t len;
            char *raw = lb_read_all(fd, &len);
            sscanf(raw, "HTTP/1.1 %u", &status);
            char *b = strstr(raw, "\r\n\r\n");
            *body = xstrdup(b ? b + 4 : "");
            free(raw);
        }
        free(req);
    }
    close(fd);
    return status;
}

/* Polls until target answers 200 with a body containing want (5 s). */
static int wait_for(unsigned port, const char *target, const char *want)
{
    for (int i = 0; i < 100; i++) {
        char *body;
        unsigned st = get(port, target, &body);
        int ok = st == 200 && body && strstr(body, want);
        free(body);
        if (ok)
            return 1;
        usleep(50000);
    }
    return 0;
}

TEST(serve_rescan_drain)
{
    unsigned port = free_port();
    struct config cfg;
    config_defaults(&cfg);
    struct st_error err;
    char listen[32], *sock = xasprintf("%s/t.sock", work),
                               *state = xasprintf("%s/state", work);
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
    CHECK(config_set(&cfg, "models", root, &err) == 0);
    CHECK(config_set(&cfg, "listen", listen, &err) == 0);
    CHECK(config_set(&cfg, "ipc_socket", sock, &err) == 0);
    CHECK(config_set(&cfg, "state_dir", state, &err) == 0);
    CHECK(config_set(&cfg, "threads", "2", &err) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        log_init("error", "off");
        _exit(daemon_run(&cfg));
    }
    CHECK(wait_for(port, "/readyz", "\"ready\""));
    CHECK(wait_for(port, "/v1/models", "\"name\":\"m\""));
    /* A model added: the watcher sees it and the daemon rescans. */
    lb_write_st(root, "added/model.safetensors",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "\1", 1);
    CHECK(wait_for(port, "/v1/models", "\"name\":\"added\""));
    /* SIGHUP rescans too: the generation moves. */
    char *body;
    CHECK(get(port, "/v1/models", &body) == 200);
    const char *g = body ? strstr(body, "\"generation\":") : NULL;
    unsigned long gen = g ? strtoul(g + 13, NULL, 10) : 0;
    free(body);
    kill(pid, SIGHUP);
    char want[64];
    snprintf(want, sizeof(want), "\"generation\":%lu", gen + 1);
    CHECK(wait_for(port, "/v1/models", want));
    kill(pid, SIGTERM);
    int status = -1;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(get(port, "/healthz", &body) == 0); /* stopped */
    free(body);
    config_free(&cfg);
    free(sock);
    free(state);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    lb_new_root(root, sizeof(root));
    lb_new_root(work, sizeof(work));
    lb_write_st(root, "m/model.safetensors",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "\1\2\3\4", 4);
    RUN(serve_rescan_drain);
    lb_remove_root(root);
    lb_remove_root(work);
    return TEST_SUMMARY();
}
