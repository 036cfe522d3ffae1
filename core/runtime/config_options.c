/* config_options: the table of every option, with its type, default, range
 * and doc, and the syntax checks of the values that need more than a type.
 * The defaults, the INI reader, command-line overrides, config_print and the
 * docs check all read this table, so an option cannot exist in one place and
 * not another. */
#include <stddef.h>
#include <string.h>

#include "config_int.h"
#include "device_name.h"
#include "util.h"

#define K 1024ULL
#define OFF(f) offsetof(struct config, f)
#define NOLIST 0, 0, NULL, NULL

static const char *check_listen(const char *v);
static const char *check_preload(const char *v);
static const char *check_no_ctl(const char *v);
static const char *check_origin(const char *v);
static const char *check_host_name(const char *v);
static const char *check_upstream(const char *v);

const struct opt config_options[] = {
    {"models", "server", OPT_STRING, "./models", 0, 0, OFF(models), 0, 0, NULL, check_no_ctl,
     "root directory of the models served"},
    {"listen", "server", OPT_STRING, "127.0.0.1:8077", 0, 0, OFF(listen), 0, 0, NULL,
     check_listen, "HTTP listen address, ADDR:PORT or [IPV6]:PORT"},
    {"threads", "server", OPT_UINT, "0", 0, 1024, OFF(threads), NOLIST,
     "HTTP worker threads; 0 = one per online CPU"},
    {"max_connections", "server", OPT_UINT, "1024", 1, 1000000, OFF(max_connections), NOLIST,
     "open connections in total; beyond it new connections get 503"},
    {"max_connections_per_ip", "server", OPT_UINT, "0", 0, 1000000,
     OFF(max_connections_per_ip), NOLIST, "open connections per client address; 0 = no limit"},
    {"connection_timeout", "server", OPT_UINT, "60", 0, 86400, OFF(connection_timeout), NOLIST,
     "seconds an idle connection stays open, and an answer waits on a mirror's upstream with "
     "nothing to send; 0 = no timeout"},
    {"header_timeout", "server", OPT_UINT, "10", 0, 3600, OFF(header_timeout), NOLIST,
     "seconds a client has to send a request line and its headers; 0 = no limit"},
    {"max_request_header_bytes", "server", OPT_SIZE32, "32K", 4096, 1024 * K,
     OFF(max_request_header_bytes), NOLIST,
     "bytes of request line and headers per request; larger requests get 431"},
    {"max_ranges", "server", OPT_UINT, "16", 1, 256, OFF(max_ranges), NOLIST,
     "byte ranges in one multipart/byteranges answer"},
    {"max_slice_bytes", "server", OPT_SIZE, "16G", 0, 1024 * K * K * K * K, OFF(max_slice_bytes),
     NOLIST, "largest slice answer, 400 slice_too_large beyond; 0 = no limit"},
    {"max_fetch_body_bytes", "server", OPT_SIZE32, "1M", 4 * K, 64 * K * K,
     OFF(max_fetch_body_bytes), NOLIST,
     "largest request body of POST /v1/models/{model}/fetch, 413 body_too_large beyond"},
    {"max_fetch_tensors", "server", OPT_UINT, "100000", 1, 10000000, OFF(max_fetch_tensors),
     NOLIST, "tensors in one fetch answer (listed, or the model's for a fetch of all), 413 "
     "too_many_tensors beyond"},
    {"max_fetch_bytes", "server", OPT_SIZE, "0", 0, 1024 * K * K * K * K, OFF(max_fetch_bytes),
     NOLIST, "largest fetch answer, 413 fetch_too_large beyond; 0 = no limit"},
    {"sendfile", "server", OPT_BOOL, "true", 0, 1, OFF(sendfile), NOLIST,
     "send contiguous spans over 64 KiB with sendfile (zero-copy); false copies every body "
     "with pread and aborts a download whose file changes in place"},
    {"ui", "server", OPT_BOOL, "true", 0, 1, OFF(ui), NOLIST,
     "serve the web console at /ui/ (its page and scripts need no token; the data it shows "
     "does); false answers 404 there"},
    {"watch", "server", OPT_BOOL, "true", 0, 1, OFF(watch), NOLIST,
     "rescan the models root when files change (inotify); SIGHUP always rescans"},
    {"state_dir", "server", OPT_STRING, "", 0, 0, OFF(state_dir), 0, 0, NULL, check_no_ctl,
     "directory for state kept across restarts (content hashes); empty = $STATE_DIRECTORY, "
     "else /var/lib/tensord as root, else $XDG_STATE_HOME/tensord or ~/.local/state/tensord"},
    {"hash_threads", "hash", OPT_UINT, "2", 1, 64, OFF(hash_threads), NOLIST,
     "threads computing the SHA-256 of served files in the background"},
    {"hash_max_bytes_per_second", "hash", OPT_SIZE, "0", 0, 1024 * K * K * K * K,
     OFF(hash_max_bytes_per_second), NOLIST,
     "read rate of background hashing, all threads together; 0 = no limit (files a client "
     "waits for are never limited)"},
    {"hash_wait", "hash", OPT_UINT, "8", 0, 300, OFF(hash_wait), NOLIST,
     "seconds a Hugging Face request waits for the content hashes of its repo (hashed first) "
     "before it is answered 503 with Retry-After; 0 = answer 503 at once"},
    {"access_log", "log", OPT_STRING, "-", 0, 0, OFF(access_log), 0, 0, NULL, check_no_ctl,
     "access log: a file path, \"-\" for stderr, or \"off\""},
    {"log_level", "log", OPT_ENUM, "info", 0, 0, OFF(log_level), 0, 0, "error|warn|info|debug",
     NULL, "daemon messages at this level and more severe go to stderr"},
    {"auth_token_file", "security", OPT_STRING, "", 0, 0, OFF(auth_token_file), 0, 0, NULL,
     check_no_ctl, "file of bearer tokens; empty = no authentication"},
    {"insecure_listen", "security", OPT_BOOL, "false", 0, 1, OFF(insecure_listen), NOLIST,
     "allow a listen address beyond loopback without auth_token_file (logged as a warning); "
     "without it such a daemon refuses to start"},
    {"tls_cert", "security", OPT_STRING, "", 0, 0, OFF(tls_cert), 0, 0, NULL, check_no_ctl,
     "PEM certificate chain; with tls_key, serve HTTPS"},
    {"tls_key", "security", OPT_STRING, "", 0, 0, OFF(tls_key), 0, 0, NULL, check_no_ctl,
     "PEM private key for tls_cert"},
    {"cors_origins", "security", OPT_STRLIST, "", 0, 0, OFF(cors_origins), OFF(n_cors_origins),
     CONFIG_MAX_CORS_ORIGINS, NULL, check_origin,
     "origins (scheme://host[:port]) whose scripts may read the answers (CORS, with "
     "credentials), or * alone for any origin (without credentials); empty = off"},
    {"allowed_hosts", "security", OPT_STRLIST, "", 0, 0, OFF(allowed_hosts),
     OFF(n_allowed_hosts), CONFIG_MAX_ALLOWED_HOSTS, NULL, check_host_name,
     "without auth_token_file, the Host names answered besides IP addresses and localhost "
     "(a DNS-rebinding page sends its own name): NAME, *.DOMAIN, or * alone for any; with "
     "tokens every Host is answered"},
    {"ipc_socket", "gpu", OPT_STRING, "", 0, 0, OFF(ipc_socket), 0, 0, NULL, check_no_ctl,
     "Unix socket for GPU leases; empty = $TENSORD_SOCKET, else "
     "$RUNTIME_DIRECTORY/tensord.sock, else $XDG_RUNTIME_DIR/tensord.sock when not root, else "
     "/run/tensord/tensord.sock"},
    {"preload", "gpu", OPT_STRLIST, "", 0, 0, OFF(preload), OFF(n_preload), CONFIG_MAX_PRELOAD,
     NULL, check_preload,
     "models loaded at start-up, MODEL@DEVICE (cuda:N, GPU-/MIG-UUID or host)"},
    {"allow_uids", "gpu", OPT_IDLIST, "", 0, 4294967294ULL, OFF(allow_uids), OFF(n_allow_uids),
     CONFIG_MAX_IDS, NULL, NULL, "user ids allowed on the IPC socket besides the daemon's own"},
    {"allow_gids", "gpu", OPT_IDLIST, "", 0, 4294967294ULL, OFF(allow_gids), OFF(n_allow_gids),
     CONFIG_MAX_IDS, NULL, NULL, "group ids allowed on the IPC socket"},
    {"ipc_idle_timeout", "gpu", OPT_UINT, "60", 0, 86400, OFF(ipc_idle_timeout), NOLIST,
     "seconds before the IPC socket closes a connection that holds no lease and sends nothing, "
     "or that stalls mid-request or mid-answer; 0 = never"},
    {"ipc_max_connections_per_uid", "gpu", OPT_UINT, "256", 0, 4096,
     OFF(ipc_max_connections_per_uid), NOLIST,
     "lease socket connections one peer uid may have open (4,096 in all); beyond, a new one "
     "is answered too_many_connections and closed; 0 = no limit"},
    {"ipc_max_leases_per_uid", "gpu", OPT_UINT, "16384", 0, 4194304, OFF(ipc_max_leases_per_uid),
     NOLIST, "leases the connections of one peer uid may hold together (1,024 per connection); "
     "an open beyond is answered too_many_leases; 0 = no limit"},
    {"legacy_ipc", "gpu", OPT_BOOL, "false", 0, 1, OFF(legacy_ipc), NOLIST,
     "also export a legacy cudaIpcMemHandle_t per allocation"},
    {"verify", "gpu", OPT_BOOL, "false", 0, 1, OFF(verify), NOLIST,
     "compare device memory with the file after a preload, before ready"},
    {"staging_buffers", "gpu", OPT_UINT, "4", 1, 64, OFF(staging_buffers), NOLIST,
     "preload reads from the disk in flight, each into a staging buffer of its own"},
    {"staging_buffer_bytes", "gpu", OPT_SIZE, "64M", 64 * K, 1024 * K * K,
     OFF(staging_buffer_bytes), NOLIST, "size of each staging buffer (and of a preload's chunks)"},
    {"preload_threads", "gpu", OPT_UINT, "0", 0, 64, OFF(preload_threads), NOLIST,
     "threads copying preload bytes from the page cache (each with two staging buffers on a "
     "GPU); 0 = the CPUs this process may use (affinity and cgroup cpu.max), less one from 4 "
     "and two from 8, at most 16"},
    {"preload_memory_limit", "gpu", OPT_SIZE, "0", 0, 1024 * K * K * K * K,
     OFF(preload_memory_limit), NOLIST, "the most memory preloads may hold on one device "
     "(a preload beyond is refused, 507); 0 = what the device, or the machine, has free"},
    {"staging_memory_limit", "gpu", OPT_SIZE, "0", 0, 1024 * K * K * K * K,
     OFF(staging_memory_limit), NOLIST, "the most memory the devices' staging rings (pinned "
     "on a GPU) may hold together: a device's ring is made smaller, and idle devices' rings "
     "are freed, to stay within it; 0 = a quarter of the memory this process may use"},
    {"s3", "s3", OPT_BOOL, "true", 0, 1, OFF(s3), NOLIST,
     "serve the read-only S3 API under /s3/ (buckets are repos)"},
    {"s3_access_key", "s3", OPT_STRING, "", 0, 0, OFF(s3_access_key), 0, 0, NULL, check_no_ctl,
     "access key id the S3 API accepts (AWS SigV4, checked); empty = anonymous reads, only "
     "while auth_token_file is empty"},
    {"s3_secret_key_file", "s3", OPT_STRING, "", 0, 0, OFF(s3_secret_key_file), 0, 0, NULL,
     check_no_ctl, "file holding the secret key of s3_access_key (its first line)"},
    {"upstream", "mirror", OPT_STRING, "", 0, 0, OFF(upstream), 0, 0, NULL, check_upstream,
     "a pull-through mirror of this Hugging Face compatible endpoint (another tensord, or "
     "https://huggingface.co): its repos are answered through a local cache while they are "
     "fetched; empty = off"},
    {"mirror_cache_dir", "mirror", OPT_STRING, "", 0, 0, OFF(mirror_cache_dir), 0, 0, NULL,
     check_no_ctl, "directory of the mirror's cache (made when missing); empty = mirror/ in "
     "the state directory"},
    {"mirror_cache_max_bytes", "mirror", OPT_SIZE, "100G", 1024 * K, 1024 * K * K * K * K,
     OFF(mirror_cache_max_bytes), NOLIST,
     "the cache's size cap: files are evicted least recently used first, never one being "
     "read, fetched, preloaded or under a lease"},
    {"mirror_block_bytes", "mirror", OPT_SIZE, "16M", 64 * K, 1024 * K * K,
     OFF(mirror_block_bytes), NOLIST,
     "the unit fetched from the upstream with one Range request (each fetched once)"},
    {"mirror_fetch_threads", "mirror", OPT_UINT, "4", 1, 64, OFF(mirror_fetch_threads), NOLIST,
     "blocks fetched from the upstream at once (one connection each)"},
    {"mirror_auth_ttl", "mirror", OPT_UINT, "30", 0, 86400, OFF(mirror_auth_ttl), NOLIST,
     "seconds the upstream's answer about a file (its commit, hash, and that it let this "
     "caller's token in) is reused; 0 = ask the upstream on every request"},
    {"mirror_offline", "mirror", OPT_ENUM, "serve-cached", 0, 0, OFF(mirror_offline), 0, 0,
     "serve-cached|strict", NULL,
     "when the upstream cannot be reached: serve-cached answers from what the cache holds "
     "(complete files by commit; the last answers about names, marked stale, within "
     "mirror_stale_max_age); strict answers 502/504"},
    {"mirror_stale_max_age", "mirror", OPT_UINT, "604800", 0, 31536000,
     OFF(mirror_stale_max_age), NOLIST,
     "seconds a name's last answer (a branch's commit, a repo's document, a listing) is "
     "served, marked stale, while the upstream cannot be reached; 0 = never"},
    {"upstream_redirect_private", "mirror", OPT_ENUM, "auto", 0, 0,
     OFF(upstream_redirect_private), 0, 0, "auto|yes|no", NULL,
     "whether a redirect from the upstream to another origin may lead the mirror to a "
     "loopback, private or link-local address (a metadata service, an internal one): auto "
     "when the upstream itself is on such an address, yes always, no never"},
    {"upstream_token_file", "mirror", OPT_STRING, "", 0, 0, OFF(upstream_token_file), 0, 0,
     NULL, check_no_ctl, "file holding the token the mirror sends for its own requests "
     "(the /v1 and S3 routes' and preloads from the upstream); callers' Hub requests carry "
     "the caller's token"},
    {"upstream_max_bytes_per_second", "mirror", OPT_SIZE, "0", 0, 1024 * K * K * K * K,
     OFF(upstream_max_bytes_per_second), NOLIST,
     "the mirror's read rate from the upstream, all fetches together; 0 = no limit"},
};

/* ---- value checks ------------------------------------------------------- */

/* No value holds a '"', so config_print can always quote one. */
static const char *check_no_ctl(const char *v)
{
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            return "control character in value";
        if (*p == '"')
            return "'\"' inside a value";
    }
    return NULL;
}

static const char *check_listen(const char *v)
{
    const char *colon = strrchr(v, ':');
    if (!colon)
        return "expected ADDR:PORT";
    if (v[0] == '[' && (colon == v || colon[-1] != ']'))
        return "expected [IPV6]:PORT";
    if (v[0] != '[' && memchr(v, ':', (size_t)(colon - v)))
        return "an IPv6 address needs brackets: [ADDR]:PORT";
    /* ":8077" would mean every interface: say so with 0.0.0.0 or [::]. */
    if (colon == v || (v[0] == '[' && colon == v + 2))
        return "the address is empty (write 127.0.0.1:PORT for loopback, 0.0.0.0:PORT or "
               "[::]:PORT for every interface)";
    const char *p = colon + 1;
    size_t n = strlen(p), used;
    uint64_t port;
    if (n > 5 || decimal_u64(p, n, &port, &used) < 0 || used != n || port > 65535)
        return "port must be 0..65535";
    return check_no_ctl(v);
}

static const char *check_preload(const char *v)
{
    const char *at = strrchr(v, '@');
    if (!at || at == v || !at[1])
        return "expected MODEL@DEVICE";
    /* The same names POST .../gpu takes (core/runtime/device_name.h). */
    enum device_kind kind;
    int index;
    const char *uuid;
    if (device_name_parse(at + 1, &kind, &index, &uuid) < 0)
        return "device must be cuda:N, cuda, a GPU-... or MIG-... UUID, or host";
    return check_no_ctl(v);
}

/* A browser's serialization of an origin (RFC 6454 §6.2): http or https,
 * a lowercase host with an optional port, no path; or "*". Whether "*"
 * stands alone is the server's check (server/http/cors.c). */
static const char *check_origin(const char *v)
{
    if (strcmp(v, "*") == 0)
        return NULL;
    const char *host = strncmp(v, "https://", 8) == 0  ? v + 8
                       : strncmp(v, "http://", 7) == 0 ? v + 7
                                                        : NULL;
    if (!host || !*host)
        return "an origin is http://HOST[:PORT] or https://HOST[:PORT] (or * alone)";
    for (const char *p = host; *p; p++) {
        if (*p >= 'A' && *p <= 'Z')
            return "browsers send origins in lower case: write it so";
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("-.:[]_", *p)))
            return "an origin has no path, query, user or other characters than a host's "
                   "and a port's (no trailing '/')";
    }
    return NULL;
}

/* A host name as a Host header carries it, without the port: letters,
 * digits, '-', '.' and '_'; "*.DOMAIN" for a domain's names; "*" alone
 * for any (the server checks it stands alone). */
static const char *check_host_name(const char *v)
{
    if (strcmp(v, "*") == 0)
        return NULL;
    const char *name = strncmp(v, "*.", 2) == 0 ? v + 2 : v;
    if (!*name)
        return "a host is NAME or *.DOMAIN (or * alone)";
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr("-._", *p)))
            return "a host is a name (letters, digits, '-', '.', '_'), without a port, scheme "
                   "or '*' inside";
    return NULL;
}

/* An upstream is http:// or https:// and a host, with an optional port and
 * path prefix; no query, fragment or user part (a token goes in
 * upstream_token_file, never in a URL that logs and messages show). */
static const char *check_upstream(const char *v)
{
    if (!*v)
        return NULL;
    const char *host = strncmp(v, "https://", 8) == 0  ? v + 8
                       : strncmp(v, "http://", 7) == 0 ? v + 7
                                                        : NULL;
    if (!host || !*host || *host == '/')
        return "an upstream is http://HOST[:PORT][/PATH] or https://HOST[:PORT][/PATH]";
    if (strpbrk(v, "?#@ "))
        return "an upstream URL has no query, fragment, user part or space";
    return check_no_ctl(v);
}

const size_t config_n_options = ARRAY_LEN(config_options);

const struct opt *config_opt_find(const char *name, size_t len)
{
    for (size_t i = 0; i < config_n_options; i++)
        if (strlen(config_options[i].name) == len && memcmp(config_options[i].name, name, len) == 0)
            return &config_options[i];
    return NULL;
}

int config_section_known(const char *s, size_t len)
{
    for (size_t i = 0; i < config_n_options; i++)
        if (strlen(config_options[i].section) == len &&
            memcmp(config_options[i].section, s, len) == 0)
            return 1;
    return 0;
}
