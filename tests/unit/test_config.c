/* Tests for core/runtime/config.c: defaults, INI syntax, every type's validation and
 * its error message, command-line overrides, print/load round trip, and that
 * the shipped config file and docs/CONFIG.md list every option. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "config_int.h"
#include "test.h"
#include "util.h"

static int load(struct config *cfg, const char *text, struct st_error *err)
{
    return config_load_buffer(cfg, text, strlen(text), "t.conf", err);
}

/* Loads text into fresh defaults and expects failure with msg in the error. */
static void expect_error(const char *text, const char *msg)
{
    struct config cfg;
    struct st_error err = {0};
    config_defaults(&cfg);
    int rc = load(&cfg, text, &err);
    if (rc != -EINVAL || err.code != ST_ERR_INVALID_ARGUMENT || !strstr(err.message, msg)) {
        fprintf(stderr, "  for %s\n  got rc %d, \"%s\", want \"%s\"\n", text, rc, err.message,
                msg);
        test_failed_flag = 1;
    }
    config_free(&cfg);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n;
    char *buf = xmalloc(cap);
    n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Tests run from the repository root (make, run_all.py); fall back to the
 * source file's location. */
static char *read_repo_file(const char *rel)
{
    char *t = read_text(rel);
    if (!t) {
        char *p = xasprintf("%.*s/../../%s", (int)(strrchr(__FILE__, '/') - __FILE__), __FILE__,
                            rel);
        t = read_text(p);
        free(p);
    }
    return t;
}

TEST(defaults)
{
    struct config c;
    config_defaults(&c);
    CHECK_STR(c.models, "./models");
    CHECK_STR(c.listen, "127.0.0.1:8077");
    CHECK_EQ_U64(c.threads, 0);
    CHECK_EQ_U64(c.max_connections, 1024);
    CHECK_EQ_U64(c.max_connections_per_ip, 0);
    CHECK_EQ_U64(c.connection_timeout, 60);
    CHECK_EQ_U64(c.max_request_header_bytes, 32768);
    CHECK_EQ_U64(c.max_ranges, 16);
    CHECK_EQ_U64(c.max_slice_bytes, 16ULL << 30);
    CHECK(c.watch == 1);
    CHECK_STR(c.access_log, "-");
    CHECK_STR(c.log_level, "info");
    CHECK_STR(c.auth_token_file, "");
    CHECK_STR(c.tls_cert, "");
    CHECK_STR(c.tls_key, "");
    CHECK_STR(c.ipc_socket, "");
    CHECK_EQ_U64(c.n_preload, 0);
    CHECK_EQ_U64(c.n_allow_uids, 0);
    CHECK_EQ_U64(c.n_allow_gids, 0);
    CHECK(c.legacy_ipc == 0);
    CHECK(c.verify == 0);
    CHECK_EQ_U64(c.staging_buffers, 4);
    CHECK_EQ_U64(c.staging_buffer_bytes, 64ULL << 20);
    CHECK(config_effective_threads(&c) >= 1);
    config_free(&c);
}

TEST(syntax)
{
    struct config c;
    struct st_error err = {0};
    config_defaults(&c);
    const char *text = "\xef\xbb\xbf# comment\n"
                       "; another\n"
                       "threads = 3   # before any section: any option\n"
                       "[server]\r\n"
                       "  models=/srv/m  \n"
                       "listen = [::1]:9000 ; inline\n"
                       "max_slice_bytes = 2G\n"
                       "max_request_header_bytes = 8k\n"
                       "watch = off\n"
                       "\n"
                       "[ log ]\n"
                       "access_log = \"/var/log/a #1.log\"  # quoted keeps the '#'\n"
                       "log_level = debug\n"
                       "[security]\n"
                       "auth_token_file=/etc/tensord/tokens\n"
                       "[gpu]\n"
                       "preload = a@cuda:0, org/b@host ,c@GPU-1234\n"
                       "allow_uids = 0, 1000\n"
                       "allow_gids = 44\n"
                       "legacy_ipc = yes\n"
                       "verify = 1\n"
                       "staging_buffer_bytes = 1M\n"
                       "staging_buffers = 8"; /* no final newline */
    CHECK(load(&c, text, &err) == 0);
    CHECK_STR(err.message, "");
    CHECK_EQ_U64(c.threads, 3);
    CHECK_STR(c.models, "/srv/m");
    CHECK_STR(c.listen, "[::1]:9000");
    CHECK_EQ_U64(c.max_slice_bytes, 2ULL << 30);
    CHECK_EQ_U64(c.max_request_header_bytes, 8192);
    CHECK(c.watch == 0);
    CHECK_STR(c.access_log, "/var/log/a #1.log");
    CHECK_STR(c.log_level, "debug");
    CHECK_STR(c.auth_token_file, "/etc/tensord/tokens");
    CHECK_EQ_U64(c.n_preload, 3);
    CHECK_STR(c.preload[0], "a@cuda:0");
    CHECK_STR(c.preload[1], "org/b@host");
    CHECK_STR(c.preload[2], "c@GPU-1234");
    CHECK_EQ_U64(c.n_allow_uids, 2);
    CHECK_EQ_U64(c.allow_uids[0], 0);
    CHECK_EQ_U64(c.allow_uids[1], 1000);
    CHECK_EQ_U64(c.n_allow_gids, 1);
    CHECK_EQ_U64(c.allow_gids[0], 44);
    CHECK(c.legacy_ipc == 1);
    CHECK(c.verify == 1);
    CHECK_EQ_U64(c.staging_buffer_bytes, 1 << 20);
    CHECK_EQ_U64(c.staging_buffers, 8);
    config_free(&c);
}

TEST(repeated_keys_last_wins)
{
    struct config c;
    struct st_error err = {0};
    config_defaults(&c);
    CHECK(load(&c,
               "[server]\nmodels = /a\nmodels = /b\n[gpu]\npreload = a@host, b@host\n"
               "preload = c@cuda:1\nallow_uids = 1,2,3\nallow_uids = 7\n",
               &err) == 0);
    CHECK_STR(c.models, "/b");
    CHECK_EQ_U64(c.n_preload, 1);
    CHECK_STR(c.preload[0], "c@cuda:1");
    CHECK_EQ_U64(c.n_allow_uids, 1);
    CHECK_EQ_U64(c.allow_uids[0], 7);
    /* An empty value clears a list. */
    CHECK(load(&c, "[gpu]\npreload =\n", &err) == 0);
    CHECK_EQ_U64(c.n_preload, 0);
    config_free(&c);
}

TEST(errors_name_file_line_option)
{
    expect_error("[server]\nthreads = 4\nbogus = 1\n", "t.conf:3: option bogus: unknown option");
    expect_error("[server]\nthreads 4\n", "t.conf:2: missing '='");
    expect_error("[nope]\n", "t.conf:1: unknown section [nope]");
    expect_error("[server\n", "t.conf:1: missing ']'");
    expect_error("[server] x\n", "t.conf:1: text after section header");
    expect_error("= 4\n", "t.conf:1: missing option name");
    expect_error("[gpu]\nthreads = 4\n", "t.conf:2: option threads: belongs in [server], not [gpu]");
    expect_error("threads = four\n", "t.conf:1: option threads: \"four\" is not an unsigned integer");
    expect_error("threads = -1\n", "option threads: \"-1\" is not an unsigned integer");
    expect_error("threads = 4x\n", "is not an unsigned integer");
    expect_error("threads =\n", "is not an unsigned integer");
    expect_error("threads = 2000\n", "t.conf:1: option threads: 2000 is out of range 0..1024");
    expect_error("threads = 99999999999999999999999\n", "option threads: number too large");
    expect_error("max_connections = 0\n", "out of range 1..1000000");
    expect_error("max_request_header_bytes = 4095\n",
                 "option max_request_header_bytes: 4095 is out of range 4096..");
    expect_error("max_slice_bytes = 16Q\n", "option max_slice_bytes: \"16Q\" is not a size");
    expect_error("max_slice_bytes = 99999999999T\n", "number too large");
    expect_error("max_slice_bytes = G\n", "is not a size");
    expect_error("staging_buffer_bytes = 1K\n", "out of range");
    expect_error("watch = maybe\n", "option watch: \"maybe\" is not a boolean");
    expect_error("log_level = loud\n", "option log_level: \"loud\" is not one of error|warn|info|debug");
    expect_error("listen = 8077\n", "option listen: expected ADDR:PORT");
    expect_error("listen = ::1:8077\n", "needs brackets");
    expect_error("listen = 0.0.0.0:70000\n", "port must be 0..65535");
    expect_error("listen = 0.0.0.0:\n", "port must be");
    expect_error("listen = 0.0.0.0:8a\n", "port must be");
    expect_error("listen = 0.0.0.0:-1\n", "port must be");
    expect_error("listen = 0.0.0.0:123456\n", "port must be");
    expect_error("preload = model\n", "option preload: \"model\": expected MODEL@DEVICE");
    expect_error("preload = m@gpu0\n", "device must be cuda:N");
    expect_error("preload = a@host,,b@host\n", "option preload: empty list entry");
    expect_error("allow_uids = 1, x\n", "option allow_uids: \"x\" is not a numeric id");
    expect_error("allow_uids = 4294967295\n", "out of range 0..4294967294");
    expect_error("models = \"/a\n", "missing closing");
    expect_error("models = \"/a\" b\n", "text after closing");
    expect_error("models = /a\x01\n", "control character");
    expect_error("models = a\"b\n", "option models: '\"' inside a value");
    expect_error("x = 1\n\0models=1", "unknown option"); /* strlen stops at NUL */
    char many[4096] = "allow_gids = 0";
    for (int i = 1; i <= CONFIG_MAX_IDS; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), ",%d", i);
    expect_error(many, "too many list entries (at most 64)");
}

TEST(nul_byte_in_buffer)
{
    struct config c;
    struct st_error err = {0};
    config_defaults(&c);
    CHECK(config_load_buffer(&c, "threads = 1\0\n", 13, "t.conf", &err) == -EINVAL);
    CHECK_CONTAINS(err.message, "t.conf:1: NUL byte");
    config_free(&c);
}

TEST(failed_value_keeps_previous)
{
    struct config c;
    struct st_error err = {0};
    config_defaults(&c);
    CHECK(load(&c, "preload = a@host\npreload = b@host, bad\n", &err) == -EINVAL);
    CHECK_EQ_U64(c.n_preload, 1);
    CHECK_STR(c.preload[0], "a@host");
    config_free(&c);
}

TEST(config_set_overrides)
{
    struct config c;
    struct st_error err = {0};
    config_defaults(&c);
    CHECK(config_set(&c, "listen", "0.0.0.0:9", &err) == 0);
    CHECK_STR(c.listen, "0.0.0.0:9");
    CHECK(config_set(&c, "max_slice_bytes", "0", &err) == 0);
    CHECK_EQ_U64(c.max_slice_bytes, 0);
    CHECK(config_set(&c, "preload", "x@cuda:0,y@cuda:1", &err) == 0);
    CHECK_EQ_U64(c.n_preload, 2);
    CHECK(config_set(&c, "threads", "abc", &err) == -EINVAL);
    CHECK_STR(err.message, "command line: option threads: \"abc\" is not an unsigned integer");
    CHECK(config_set(&c, "nope", "1", &err) == -EINVAL);
    CHECK_STR(err.message, "command line: option nope: unknown option");
    config_free(&c);
}

TEST(load_file)
{
    struct config c;
    struct st_error err = {0};
    config_defaults(&c);
    CHECK(config_load_file(&c, "/nonexistent/tensord.conf", &err) == -ENOENT);
    CHECK(err.code == ST_ERR_IO);
    CHECK_CONTAINS(err.message, "/nonexistent/tensord.conf: No such file");
    char path[] = "/tmp/test_config_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("[server]\nthreads = 2\nmax_ranges = 0\n", f);
    fclose(f);
    CHECK(config_load_file(&c, path, &err) == -EINVAL);
    char want[128];
    snprintf(want, sizeof(want), "%s:3: option max_ranges: 0 is out of range 1..256", path);
    CHECK_STR(err.message, want);
    unlink(path);
    config_free(&c);
}

static char *print_to_string(const struct config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print(c, f);
    fclose(f);
    return buf;
}

TEST(print_round_trip)
{
    struct config a, b;
    struct st_error err = {0};
    config_defaults(&a);
    CHECK(load(&a,
               "models = \" /odd #path \"\nmax_slice_bytes = 1536M\nmax_request_header_bytes = 5000\n"
               "preload = \"a@host, #b@cuda:3\"\nallow_gids = 5, 6\nwatch = no\naccess_log = off\n",
               &err) == 0);
    char *text = print_to_string(&a);
    config_defaults(&b);
    CHECK(load(&b, text, &err) == 0);
    CHECK_STR(err.message, "");
    char *again = print_to_string(&b);
    CHECK_STR(text, again);
    CHECK_STR(b.models, " /odd #path ");
    CHECK_EQ_U64(b.max_slice_bytes, 1536ULL << 20);
    CHECK_EQ_U64(b.max_request_header_bytes, 5000);
    CHECK_EQ_U64(b.n_allow_gids, 2);
    CHECK(b.watch == 0);
    CHECK_CONTAINS(text, "max_slice_bytes = 1536M\n");
    CHECK_CONTAINS(text, "preload = \"a@host, #b@cuda:3\"\n"); /* found by fuzz_config */
    CHECK_EQ_U64(b.n_preload, 2);
    CHECK_STR(b.preload[1], "#b@cuda:3");
    CHECK_CONTAINS(text, "[gpu]\n");
    /* Every option appears with its doc comment. */
    for (size_t i = 0; i < config_n_options; i++) {
        const struct opt *o = &config_options[i];
        char *line = xasprintf("# %s\n%s = ", o->doc, o->name);
        CHECK_CONTAINS(text, line);
        free(line);
    }
    free(text);
    free(again);
    config_free(&a);
    config_free(&b);
}

TEST(ipc_socket_path)
{
    struct config c;
    config_defaults(&c);
    unsetenv("RUNTIME_DIRECTORY");
    unsetenv("TENSORD_SOCKET");
    unsetenv("XDG_RUNTIME_DIR");
    char *p = config_ipc_socket_path(&c);
    CHECK_STR(p, "/run/tensord/tensord.sock");
    free(p);
    /* Root keeps the system socket; anyone else uses their runtime dir. */
    setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    p = config_ipc_socket_path(&c);
    CHECK_STR(p, geteuid() == 0 ? "/run/tensord/tensord.sock" : "/run/user/1000/tensord.sock");
    free(p);
    setenv("RUNTIME_DIRECTORY", "/run/x:/run/y", 1);
    p = config_ipc_socket_path(&c);
    CHECK_STR(p, "/run/x/tensord.sock");
    free(p);
    setenv("TENSORD_SOCKET", "rel/t.sock", 1);
    p = config_ipc_socket_path(&c);
    CHECK_STR(p, "rel/t.sock");
    free(p);
    struct st_error err = {0};
    CHECK(config_set(&c, "ipc_socket", "/tmp/s.sock", &err) == 0);
    p = config_ipc_socket_path(&c);
    CHECK_STR(p, "/tmp/s.sock");
    free(p);
    /* A client's candidates: a socket someone named is the only one (a
     * missing one is not a reason to try another daemon's), ipc_socket
     * first as the daemon chooses; else the default places in order. */
    char *paths[8];
    const char *named;
    size_t n = config_ipc_socket_candidates(&c, paths, 8, &named);
    CHECK_EQ_U64(n, 1);
    CHECK_STR(paths[0], "/tmp/s.sock");
    CHECK_STR(named, "ipc_socket");
    free(paths[0]);
    n = config_ipc_socket_candidates(NULL, paths, 8, &named);
    CHECK_EQ_U64(n, 1);
    CHECK_STR(paths[0], "rel/t.sock");
    CHECK_STR(named, "$TENSORD_SOCKET");
    free(paths[0]);
    unsetenv("TENSORD_SOCKET");
    n = config_ipc_socket_candidates(NULL, paths, 8, &named);
    CHECK(named == NULL);
    CHECK_EQ_U64(n, 2);
    const char *want[] = {"/run/user/1000/tensord.sock", "/run/tensord/tensord.sock"};
    for (size_t i = 0; i < n && i < 2; i++)
        CHECK_STR(paths[i], want[i]);
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    unsetenv("XDG_RUNTIME_DIR");
    n = config_ipc_socket_candidates(NULL, paths, 1, &named); /* capacity bounds it */
    CHECK_EQ_U64(n, 1);
    CHECK_STR(paths[0], "/run/tensord/tensord.sock");
    free(paths[0]);
    unsetenv("TENSORD_SOCKET");
    unsetenv("RUNTIME_DIRECTORY");
    config_free(&c);
}

TEST(listen_checks)
{
    struct config c;
    struct st_error err = {0};
    config_defaults(&c);
    /* ":PORT" would listen everywhere without saying so. */
    CHECK(config_set(&c, "listen", ":18078", &err) < 0);
    CHECK_CONTAINS(err.message, "the address is empty");
    CHECK(config_set(&c, "listen", "[]:18078", &err) < 0);
    CHECK(config_set(&c, "listen", "0.0.0.0:18078", &err) == 0);
    CHECK(config_set(&c, "listen", "[::]:0", &err) == 0);
    CHECK(config_listen_is_loopback("127.0.0.1:8077"));
    CHECK(config_listen_is_loopback("127.3.2.1:1"));
    CHECK(config_listen_is_loopback("[::1]:8077"));
    CHECK(config_listen_is_loopback("[::ffff:127.0.0.1]:8077"));
    CHECK(!config_listen_is_loopback("0.0.0.0:8077"));
    CHECK(!config_listen_is_loopback("[::]:8077"));
    CHECK(!config_listen_is_loopback("10.1.2.3:8077"));
    CHECK(!config_listen_is_loopback("[fe80::1]:8077"));
    CHECK(!config_listen_is_loopback(":8077"));
    CHECK(!config_listen_is_loopback("8077"));
    CHECK(config_option_is_bool("insecure_listen"));
    CHECK(config_option_is_bool("watch"));
    CHECK(!config_option_is_bool("listen"));
    CHECK(!config_option_is_bool("nonesuch"));
    CHECK_EQ_U64(c.insecure_listen, 0);
    CHECK(config_set(&c, "insecure_listen", "true", &err) == 0);
    CHECK_EQ_U64(c.insecure_listen, 1);
    config_free(&c);
}

TEST(state_dir_path)
{
    struct config c;
    struct st_error err = {0};
    config_defaults(&c);
    char *saved = getenv("STATE_DIRECTORY") ? xstrdup(getenv("STATE_DIRECTORY")) : NULL;
    setenv("STATE_DIRECTORY", "/var/lib/x:/var/lib/y", 1);
    char *p = config_state_dir_path(&c);
    CHECK_STR(p, "/var/lib/x"); /* systemd's StateDirectory=, the first of several */
    free(p);
    setenv("STATE_DIRECTORY", "relative", 1); /* not systemd's: ignored */
    setenv("XDG_STATE_HOME", "/xdg", 1);
    setenv("HOME", "/home/u", 1);
    p = config_state_dir_path(&c);
    CHECK_STR(p, geteuid() == 0 ? "/var/lib/tensord" : "/xdg/tensord");
    free(p);
    unsetenv("STATE_DIRECTORY");
    unsetenv("XDG_STATE_HOME");
    p = config_state_dir_path(&c);
    CHECK_STR(p, geteuid() == 0 ? "/var/lib/tensord" : "/home/u/.local/state/tensord");
    free(p);
    CHECK(config_set(&c, "state_dir", "/srv/st", &err) == 0);
    p = config_state_dir_path(&c);
    CHECK_STR(p, "/srv/st");
    free(p);
    if (saved)
        setenv("STATE_DIRECTORY", saved, 1);
    free(saved);
    config_free(&c);
}

TEST(shipped_config_loads_and_lists_every_option)
{
    char *text = read_repo_file("config/tensord.conf");
    CHECK(text != NULL);
    if (!text)
        return;
    struct config c;
    struct st_error err = {0};
    config_defaults(&c);
    CHECK(load(&c, text, &err) == 0);
    CHECK_STR(err.message, "");
    for (size_t i = 0; i < config_n_options; i++) {
        const char *name = config_options[i].name;
        char *key = xasprintf("\n%s =", name), *commented = xasprintf("\n# %s =", name);
        if (!strstr(text, key) && !strstr(text, commented)) {
            fprintf(stderr, "  config/tensord.conf lacks option %s\n", name);
            test_failed_flag = 1;
        }
        free(key);
        free(commented);
    }
    config_free(&c);
    free(text);
}

TEST(docs_list_every_option)
{
    char *text = read_repo_file("docs/CONFIG.md");
    CHECK(text != NULL);
    if (!text)
        return;
    /* The type column, by enum opt_type. */
    static const char *const type_names[] = {"string", "enum", "uint", "size",
                                             "size",   "bool", "list", "list"};
    for (size_t i = 0; i < config_n_options; i++) {
        const struct opt *o = &config_options[i];
        char *cell = xasprintf("| `%s` |", o->name);
        if (!strstr(text, cell)) {
            fprintf(stderr, "  docs/CONFIG.md has no table row for %s\n", o->name);
            test_failed_flag = 1;
        }
        char *def = xasprintf("| `%s` | %s | `%s` |", o->name, type_names[o->type], o->def);
        if (o->def[0] && !strstr(text, def)) {
            fprintf(stderr, "  docs/CONFIG.md: row for %s should start %s\n", o->name, def);
            test_failed_flag = 1;
        }
        free(def);
        free(cell);
    }
    free(text);
}

int main(void)
{
    RUN(defaults);
    RUN(syntax);
    RUN(repeated_keys_last_wins);
    RUN(errors_name_file_line_option);
    RUN(nul_byte_in_buffer);
    RUN(failed_value_keeps_previous);
    RUN(config_set_overrides);
    RUN(load_file);
    RUN(print_round_trip);
    RUN(ipc_socket_path);
    RUN(listen_checks);
    RUN(state_dir_path);
    RUN(shipped_config_loads_and_lists_every_option);
    RUN(docs_list_every_option);
    return TEST_SUMMARY();
}
