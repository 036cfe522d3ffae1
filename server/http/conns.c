/* conns: see conns.h. */
#include "conns.h"

#include <errno.h>
#include <linux/sockios.h> /* SIOCOUTQ */
#include <linux/tcp.h> /* tcpi_bytes_received, which glibc's netinet/tcp.h lacks */
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/* Where a connection's answer stands with suspension (the table's lock). */
enum susp { SUSP_NONE, SUSP_WATCHED, SUSP_GAVE_UP };

struct conns_entry {
    struct conns *table;
    int fd;
    void *conn;                     /* what table->resume is given */
    uint64_t id;                    /* its epoll events' data: entries are found by it under
                                     * the lock (an event may outlive its entry) */
    enum susp susp;                 /* table->lock */
    uint64_t susp_ns;               /* when it was suspended (table->lock) */
    int in_epoll;                   /* its socket is in the reaper's epoll set (table->lock) */
    atomic_int gave_up;             /* set once, never cleared: the connection is ending */
    _Atomic uint64_t send_dev, send_ino; /* the file it sends with sendfile, or 0, 0 */
    _Atomic uint64_t since_ns;      /* CONN_RECEIVED, CONN_IDLE or when the request began */
    _Atomic uint64_t rx_idle;       /* bytes received when it went idle */
    uint64_t consumed;              /* bytes of the requests answered so far (conn_idle's
                                     * thread only); valid while `exact` */
    int exact;                      /* consumed counts every byte received: plain TCP, and no
                                     * request whose wire size was unknown */
    struct conns_entry *prev, *next; /* guarded by table->lock */
};

struct conns {
    uint64_t timeout_ns;            /* header_timeout; 0: no deadline */
    uint64_t idle_ns;               /* connection_timeout for suspended answers; 0: none */
    void (*resume)(void *conn);
    pthread_mutex_t lock;           /* guards the list and the suspensions; taken per
                                     * connection and per suspension, not per request */
    struct conns_entry head;      /* circular list sentinel */
    uint64_t next_id;
    int epfd;                       /* suspended sockets (EPOLLRDHUP), and wakefd */
    int wakefd;                     /* an eventfd: stop */
    int stopping;
    int closing;                    /* every suspended answer is given up, and any new one */
    int reaping;                    /* the reaper thread runs */
    pthread_t thread;
};

#define WAKE_ID 0 /* wakefd's epoll data; entries' ids start at 1 */
#define TICK_NS 1000000000ull

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

/* Gives up c's suspended answer: it is resumed (table->resume) and ends. */
static void do_give_up(struct conns *d, struct conns_entry *c, const char *why)
{
    if (c->susp != SUSP_WATCHED)
        return;
    c->susp = SUSP_GAVE_UP;
    atomic_store(&c->gave_up, 1);
    log_msg(LOG_DEBUG, "gave up a suspended answer: %s", why);
    d->resume(c->conn);
}

/* The entry whose epoll data is id, or NULL (it went meanwhile). */
static struct conns_entry *do_find(struct conns *d, uint64_t id)
{
    for (struct conns_entry *c = d->head.next; c != &d->head; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* Once a tick: requests past header_timeout are shut down, suspended
 * answers past connection_timeout given up. */
static void do_scan(struct conns *d, uint64_t now)
{
    for (struct conns_entry *c = d->head.next; c != &d->head; c = c->next) {
        if (d->timeout_ns) {
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
        if (d->idle_ns && c->susp == SUSP_WATCHED && now - c->susp_ns > d->idle_ns)
            do_give_up(d, c, "connection_timeout");
    }
}

static void *reaper(void *arg)
{
    struct conns *d = arg;
    struct epoll_event ev[64];
    uint64_t last = time_mono_ns();
    for (;;) {
        uint64_t now = time_mono_ns(), due = last + TICK_NS;
        int ms = now >= due ? 0 : (int)((due - now) / 1000000) + 1;
        int n = epoll_wait(d->epfd, ev, 64, ms);
        pthread_mutex_lock(&d->lock);
        if (d->stopping)
            break;
        for (int i = 0; i < n; i++) {
            struct conns_entry *c = ev[i].data.u64 == WAKE_ID ? NULL : do_find(d, ev[i].data.u64);
            if (c)
                do_give_up(d, c, "its client left");
        }
        now = time_mono_ns();
        if (now >= last + TICK_NS) {
            do_scan(d, now);
            last = now;
        }
        pthread_mutex_unlock(&d->lock);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

struct conns *conns_start(unsigned header_seconds, unsigned idle_seconds,
                          void (*resume)(void *conn))
{
    struct conns *d = xcalloc(1, sizeof(*d));
    d->timeout_ns = (uint64_t)header_seconds * 1000000000ULL;
    d->idle_ns = (uint64_t)idle_seconds * 1000000000ULL;
    d->resume = resume;
    d->next_id = WAKE_ID + 1;
    pthread_mutex_init(&d->lock, NULL);
    d->head.next = d->head.prev = &d->head;
    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    d->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event wake = {.events = EPOLLIN, .data.u64 = WAKE_ID};
    if (d->epfd < 0 || d->wakefd < 0 || epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->wakefd, &wake) < 0 ||
        pthread_create(&d->thread, NULL, reaper, d) != 0)
        log_msg(LOG_WARN, "header_timeout is off, and suspended answers are not watched: cannot "
                "start the connection reaper: %s", strerror(errno));
    else
        d->reaping = 1;
    return d;
}

void conns_stop(struct conns *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->stopping = 1;
    pthread_mutex_unlock(&d->lock);
    uint64_t one = 1;
    if (d->reaping && write(d->wakefd, &one, sizeof(one)) != sizeof(one))
        log_msg(LOG_WARN, "conns: cannot wake the reaper: %s", strerror(errno));
    if (d->reaping)
        pthread_join(d->thread, NULL);
    /* Connections still listed belong to a daemon that is already stopped. */
    while (d->head.next != &d->head) {
        struct conns_entry *c = d->head.next;
        c->prev->next = c->next;
        c->next->prev = c->prev;
        free(c);
    }
    if (d->epfd >= 0)
        close(d->epfd);
    if (d->wakefd >= 0)
        close(d->wakefd);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

struct conns_entry *conns_add(struct conns *d, int fd, int tls, void *conn)
{
    if (!d)
        return NULL;
    struct conns_entry *c = xcalloc(1, sizeof(*c));
    c->table = d;
    c->fd = fd;
    c->conn = conn;
    c->exact = !tls;
    atomic_store(&c->since_ns, time_mono_ns());
    pthread_mutex_lock(&d->lock);
    c->id = d->next_id++;
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
    if (c->in_epoll) /* before libmicrohttpd closes the socket: the set holds no stale one */
        epoll_ctl(d->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    pthread_mutex_unlock(&d->lock);
    free(c);
}

int conn_suspend(struct conns_entry *c)
{
    if (!c)
        return 0;
    struct conns *d = c->table;
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    if (d->closing || c->susp == SUSP_GAVE_UP) {
        rc = -1;
    } else if (d->reaping) {
        c->susp = SUSP_WATCHED;
        c->susp_ns = time_mono_ns();
        /* One event per suspension (ONESHOT): a client that half-closed
         * while its answer ran reports at once when suspended again. */
        struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT, .data.u64 = c->id};
        if (epoll_ctl(d->epfd, c->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev) == 0)
            c->in_epoll = 1;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}

int conn_resume(struct conns_entry *c)
{
    if (!c)
        return 1;
    struct conns *d = c->table;
    pthread_mutex_lock(&d->lock);
    /* Without a reaper nothing watches, and a waiter always resumes. */
    int mine = c->susp == SUSP_WATCHED || (!d->reaping && c->susp == SUSP_NONE);
    if (c->susp == SUSP_WATCHED)
        c->susp = SUSP_NONE;
    pthread_mutex_unlock(&d->lock);
    return mine;
}

int conn_gave_up(const struct conns_entry *c)
{
    return c && atomic_load(&c->gave_up);
}

void conns_give_up_all(struct conns *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->closing = 1;
    for (struct conns_entry *c = d->head.next; c != &d->head; c = c->next)
        do_give_up(d, c, "the daemon is stopping");
    pthread_mutex_unlock(&d->lock);
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
