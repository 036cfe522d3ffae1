/* conns: see conns.h. */
#include "conns.h"

#include <linux/tcp.h> /* tcpi_bytes_received, which glibc's netinet/tcp.h lacks */
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <linux/sockios.h> /* SIOCOUTQ */
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"
#include "util.h"

struct conns_entry {
    int fd;
    _Atomic uint64_t send_dev, send_ino; /* the file it sends with sendfile, or 0, 0 */
    _Atomic uint64_t since_ns;      /* CONN_RECEIVED, CONN_IDLE or when the request began */
    _Atomic uint64_t rx_idle;       /* bytes received when it went idle */
    uint64_t consumed;              /* bytes of the requests answered so far (conn_idle's
                                     * thread only); valid while `exact` */
    int exact;                      /* consumed counts every byte received: plain TCP, and no
                                     * request whose wire size was unknown */
    struct conns_entry *prev, *next; /* guarded by deadlines.lock */
};

struct conns {
    uint64_t timeout_ns;            /* 0: no deadline, and no reaper thread */
    pthread_mutex_t lock;           /* guards the list; taken per connection, not per request */
    pthread_cond_t wake;
    struct conns_entry head;      /* circular list sentinel */
    int stopping;
    int reaping;                    /* the reaper thread runs */
    pthread_t thread;
};

/* Bytes the peer has sent on TCP socket fd; 0 when unknown (not TCP). */
static uint64_t bytes_received(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
        return 0;
    return ti.tcpi_bytes_received;
}

/* Bytes of the connection's socket that its peer acknowledged, or
 * CONN_BYTES_UNKNOWN (not TCP). */
static uint64_t bytes_acked(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof(ti.tcpi_bytes_acked))
        return CONN_BYTES_UNKNOWN;
    return ti.tcpi_bytes_acked;
}

uint64_t conn_bytes_written(const struct conns_entry *c)
{
    int queued;
    uint64_t acked = c ? bytes_acked(c->fd) : CONN_BYTES_UNKNOWN;
    /* Acknowledged plus still queued is every byte written since the
     * connection opened (write_seq less the initial sequence number). */
    if (acked == CONN_BYTES_UNKNOWN || ioctl(c->fd, SIOCOUTQ, &queued) != 0 || queued < 0)
        return CONN_BYTES_UNKNOWN;
    return acked + (uint64_t)queued;
}

uint64_t conn_bytes_delivered(const struct conns_entry *c)
{
    return c ? bytes_acked(c->fd) : CONN_BYTES_UNKNOWN;
}

/* An idle connection whose peer sent more bytes than it had when it went
 * idle has begun its next request: start its clock. Only the idle -> armed
 * change is made here, with a compare-and-swap, so a worker that armed or
 * answered the request in the meantime is never overridden. */
static void notice_new_request(struct conns_entry *c, uint64_t now)
{
    uint64_t idle = CONN_IDLE;
    if (atomic_load_explicit(&c->since_ns, memory_order_acquire) == CONN_IDLE &&
        bytes_received(c->fd) > atomic_load_explicit(&c->rx_idle, memory_order_relaxed))
        atomic_compare_exchange_strong_explicit(&c->since_ns, &idle, now, memory_order_relaxed,
                                                memory_order_relaxed);
}

static void *reaper(void *arg)
{
    struct conns *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&d->wake, &d->lock, &until);
        uint64_t now = time_mono_ns();
        for (struct conns_entry *c = d->head.next; c != &d->head; c = c->next) {
            notice_new_request(c, now);
            uint64_t since = atomic_load_explicit(&c->since_ns, memory_order_relaxed);
            if (conn_overdue(since, now, d->timeout_ns)) {
                /* Holding the lock: libmicrohttpd removes a connection here
                 * before it closes the descriptor, so fd is still this socket. */
                shutdown(c->fd, SHUT_RDWR);
                atomic_store_explicit(&c->since_ns, CONN_RECEIVED, memory_order_relaxed);
                log_msg(LOG_DEBUG, "closed a connection that sent no complete request in time");
            }
        }
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

struct conns *conns_start(unsigned seconds)
{
    struct conns *d = xcalloc(1, sizeof(*d));
    d->timeout_ns = (uint64_t)seconds * 1000000000ULL;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->wake, NULL);
    d->head.next = d->head.prev = &d->head;
    if (seconds && pthread_create(&d->thread, NULL, reaper, d) != 0)
        log_msg(LOG_WARN, "header_timeout is off: cannot start its thread");
    else
        d->reaping = seconds > 0;
    return d;
}

void conns_stop(struct conns *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->stopping = 1;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    if (d->reaping)
        pthread_join(d->thread, NULL);
    /* Connections still listed belong to a daemon that is already stopped. */
    while (d->head.next != &d->head) {
        struct conns_entry *c = d->head.next;
        c->prev->next = c->next;
        c->next->prev = c->prev;
        free(c);
    }
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->wake);
    free(d);
}

struct conns_entry *conns_add(struct conns *d, int fd, int tls)
{
    if (!d)
        return NULL;
    struct conns_entry *c = xcalloc(1, sizeof(*c));
    c->fd = fd;
    c->exact = !tls;
    atomic_store(&c->since_ns, time_mono_ns());
    pthread_mutex_lock(&d->lock);
    c->next = d->head.next;
    c->prev = &d->head;
    d->head.next->prev = c;
    d->head.next = c;
    pthread_mutex_unlock(&d->lock);
    return c;
}

void conns_remove(struct conns *d, struct conns_entry *c)
{
    if (!d || !c)
        return;
    pthread_mutex_lock(&d->lock);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    pthread_mutex_unlock(&d->lock);
    free(c);
}

void conn_arm(struct conns_entry *c)
{
    if (c)
        atomic_store_explicit(&c->since_ns, time_mono_ns(), memory_order_relaxed);
}

void conn_disarm(struct conns_entry *c)
{
    if (c)
        atomic_store_explicit(&c->since_ns, CONN_RECEIVED, memory_order_relaxed);
}

void conn_sending(struct conns_entry *c, uint64_t dev, uint64_t ino)
{
    if (!c)
        return;
    atomic_store_explicit(&c->send_dev, dev, memory_order_relaxed);
    atomic_store_explicit(&c->send_ino, ino, memory_order_relaxed);
}

unsigned conns_cut_file(struct conns *d, uint64_t dev, uint64_t ino)
{
    unsigned n = 0;
    if (!d)
        return 0;
    pthread_mutex_lock(&d->lock);
    for (struct conns_entry *c = d->head.next; c != &d->head; c = c->next) {
        if (atomic_load_explicit(&c->send_ino, memory_order_relaxed) == ino &&
            atomic_load_explicit(&c->send_dev, memory_order_relaxed) == dev && ino != 0) {
            /* Under the lock, as the reaper: fd is still this socket. */
            shutdown(c->fd, SHUT_RDWR);
            n++;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return n;
}

void conn_idle(struct conns_entry *c, uint64_t request_bytes)
{
    if (!c)
        return;
    /* The bytes received so far are the requests answered: counted, with no
     * system call on the request path, while every request's size on the
     * wire is known; asked of the kernel otherwise (TLS records, chunked
     * bodies), which costs about a microsecond. */
    if (request_bytes == CONN_BYTES_UNKNOWN)
        c->exact = 0;
    c->consumed += c->exact ? request_bytes : 0;
    atomic_store_explicit(&c->rx_idle, c->exact ? c->consumed : bytes_received(c->fd),
                          memory_order_relaxed);
    atomic_store_explicit(&c->since_ns, CONN_IDLE, memory_order_release);
}
