/* tensord: command-line entry point. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "daemon.h"
#include "inspect.h"
#include "log.h"
#include "verify.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tensord [serve] [--config FILE] [--OPTION VALUE]...\n"
            "       tensord inspect PATH...\n"
            "       tensord verify [--config FILE] [--state-dir DIR] PATH...\n"
            "       tensord --print-config [--config FILE] [--OPTION VALUE]...\n"
            "       tensord --print-socket [--config FILE] [--OPTION VALUE]...\n"
            "       tensord --version | --help\n"
            "\n"
            "serve (the default) serves the safetensors models under --models over HTTP.\n"
            "Common options (every option of the config file works as --name, '_' or '-'):\n"
            "  --models DIR        models root (default ./models)\n"
            "  --listen ADDR:PORT  listen address (default 127.0.0.1:8077; [::1]:8077 for IPv6)\n"
            "  --threads N         HTTP worker threads (default: one per CPU)\n"
            "  --config FILE       INI configuration file (see docs/CONFIG.md)\n"
            "  --ipc-socket PATH   Unix socket for GPU/host memory leases (default:\n"
            "                      $TENSORD_SOCKET, else $XDG_RUNTIME_DIR/tensord.sock when not\n"
            "                      root, else /run/tensord/tensord.sock)\n"
            "  --preload MODEL@DEVICE  load a model for leases at start (DEVICE host or cuda:N)\n"
            "  --state-dir DIR     where the content hashes are kept\n"
            "  --auth-token-file FILE  bearer tokens; needed to listen beyond loopback\n"
            "  --insecure-listen   listen beyond loopback without tokens (logged); boolean\n"
            "                      options alone mean true\n"
            "  --print-config      print the effective configuration and exit\n"
            "  --print-socket      print the lease socket path the daemon would use and exit\n"
            "\n"
            "inspect validates .safetensors files and model directories and prints their\n"
            "tensors. verify re-hashes files, model directories or a models root and compares\n"
            "each SHA-256 with the one the daemon recorded in its state directory\n"
            "(`make run` keeps it in build/run/state). `tensord COMMAND --help` says more.\n"
            "\n"
            "Exit status, of every command: 0 success; 1 something checked is bad (inspect:\n"
            "an invalid file; verify: a hash that does not match); 2 the command could not do\n"
            "what was asked (a usage or configuration error, a path that does not exist or\n"
            "cannot be read, serve unable to start), which wins over 1; 3 verify: some file\n"
            "has no recorded hash yet.\n");
}

enum print { PRINT_NOTHING, PRINT_CONFIG, PRINT_SOCKET };

/* Applies --config first, then every other --name value in order, so the
 * command line overrides the file whatever the argument order. */
static int parse_options(int argc, char **argv, struct config *cfg, int *print)
{
    struct st_error err;
    for (int i = 0; i < argc; i++) {
        const char *path = NULL;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
        if (path && config_load_file(cfg, path, &err) < 0) {
            fprintf(stderr, "tensord: %s\n", err.message);
            return -1;
        }
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--print-config") == 0 || strcmp(a, "--print-socket") == 0) {
            *print = strcmp(a, "--print-config") == 0 ? PRINT_CONFIG : PRINT_SOCKET;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            fprintf(stderr, "tensord: unexpected argument \"%s\"\n", a);
            return -1;
        }
        char name[64];
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nlen >= sizeof(name)) {
            fprintf(stderr, "tensord: unknown option \"%s\"\n", a);
            return -1;
        }
        for (size_t k = 0; k < nlen; k++)
            name[k] = a[2 + k] == '-' ? '_' : a[2 + k];
        name[nlen] = '\0';
        const char *value = eq ? eq + 1 : NULL;
        /* A boolean option alone (--insecure-listen) means true. */
        if (!value && config_option_is_bool(name) &&
            (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0))
            value = "true";
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tensord: option --%s needs a value\n", name);
                return -1;
            }
            value = argv[++i];
        }
        if (strcmp(name, "config") == 0)
            continue;
        if (config_set(cfg, name, value, &err) < 0) {
            fprintf(stderr, "tensord: %s\n", err.message);
            return -1;
        }
    }
    return 0;
}

/* Anyone who can reach a listen address beyond loopback can read every
 * model: without tokens that takes an explicit insecure_listen, and is
 * logged. Returns 1 when the daemon may start. */
static int exposure_accepted(const struct config *cfg)
{
    if ((cfg->auth_token_file && cfg->auth_token_file[0]) ||
        config_listen_is_loopback(cfg->listen))
        return 1;
    if (!cfg->insecure_listen) {
        log_msg(LOG_ERROR,
                "listen = %s reaches beyond loopback and auth_token_file is not set: anyone "
                "who can reach it may read every model. Set auth_token_file, listen on "
                "127.0.0.1 (or [::1]), or accept it with --insecure-listen (insecure_listen = "
                "true)", cfg->listen);
        return 0;
    }
    log_msg(LOG_WARN, "listening on %s beyond loopback without authentication "
                      "(insecure_listen = true)", cfg->listen);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)) {
        printf("tensord %s\n", TENSORD_VERSION);
        return 0;
    }
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
                      strcmp(argv[1], "help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "inspect") == 0)
        return inspect_main(argc - 2, argv + 2, stdout, stderr);
    if (argc >= 2 && strcmp(argv[1], "verify") == 0)
        return verify_main(argc - 2, argv + 2, stdout, stderr);

    int first = 1;
    if (argc >= 2 && strcmp(argv[1], "serve") == 0)
        first = 2;
    else if (argc >= 2 && argv[1][0] != '-') {
        fprintf(stderr, "tensord: unknown command \"%s\"\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
    }
    struct config cfg;
    int print = PRINT_NOTHING;
    config_defaults(&cfg);
    if (parse_options(argc - first, argv + first, &cfg, &print) < 0) {
        config_free(&cfg);
        return 2;
    }
    if (print != PRINT_NOTHING) {
        if (print == PRINT_CONFIG) {
            config_print(&cfg, stdout);
        } else {
            char *sock = config_ipc_socket_path(&cfg);
            printf("%s\n", sock);
            free(sock);
        }
        config_free(&cfg);
        return 0;
    }
    if (log_init(cfg.log_level, cfg.access_log) < 0) {
        fprintf(stderr, "tensord: cannot open access_log \"%s\": %s\n", cfg.access_log,
                strerror(errno));
        config_free(&cfg);
        return 2;
    }
    if (!exposure_accepted(&cfg)) {
        config_free(&cfg);
        return 2;
    }
    int rc = daemon_run(&cfg);
    config_free(&cfg);
    return rc;
}
