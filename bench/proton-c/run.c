/* The run's skeleton: connections on one proactor served by `threads` threads, a
 * phase clock on the proactor's timeout that moves the run forward (receivers
 * attached -> senders attached -> sending -> settling -> draining -> closing), and
 * the handlers that route each event to its sender or receiver. Every phase has a
 * deadline, so a silent or misbehaving broker ends the run with an error. */
#include "errors.h"
#include "run.h"

#include <proton/condition.h>
#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/event.h>
#include <proton/link.h>
#include <proton/sasl.h>
#include <proton/session.h>
#include <proton/transport.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 10
#define CLOSE_GRACE_NS (UINT64_C(5) * 1000000000)

uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t seconds_ns(double s) { return (uint64_t)(s * 1e9); }

bool run_advance(run_t *r, phase_t phase) {
  int cur = atomic_load(&r->phase);
  while (cur < (int)phase) {
    if (atomic_compare_exchange_weak(&r->phase, &cur, (int)phase)) return true;
  }
  return false;
}

void run_abort(run_t *r, const char *what) {
  if (what) errors_add("%s", what);
  run_advance(r, PHASE_CLOSING);
}

/* Wakes every live connection of a role (or both: role < 0), so it sees a new phase.
 * Under the lock: a connection marked gone may already be freed by the proactor. */
static void wake(run_t *r, int role) {
  pthread_mutex_lock(&r->lock);
  for (int i = 0; i < LOADGEN_MAX_PEERS; i++) {
    peer_t *ps[2] = {&r->senders[i], &r->receivers[i]};
    for (int k = 0; k < 2; k++) {
      peer_t *p = ps[k];
      if (p->started && !p->gone && (role < 0 || (int)p->role == role)) pn_connection_wake(p->connection);
    }
  }
  pthread_mutex_unlock(&r->lock);
}

static int live_connections(run_t *r) {
  int n = 0;
  pthread_mutex_lock(&r->lock);
  for (int i = 0; i < LOADGEN_MAX_PEERS; i++) {
    n += r->senders[i].started && !r->senders[i].gone;
    n += r->receivers[i].started && !r->receivers[i].gone;
  }
  pthread_mutex_unlock(&r->lock);
  return n;
}

static void connect_peer(run_t *r, peer_t *p) {
  const options_t *o = r->o;
  char container[96];
  snprintf(container, sizeof container, "tandem-loadgen-%ld-%s%d", (long)getpid(), p->role == ROLE_SENDER ? "s" : "r", p->index);
  p->connection = pn_connection();
  pn_transport_t *t = pn_transport();
  if (!p->connection || !t) {
    run_abort(r, "out of memory for a connection");
    return;
  }
  pn_connection_set_container(p->connection, container);
  pn_connection_set_hostname(p->connection, o->host);
  pn_connection_set_context(p->connection, p);
  pn_transport_set_max_frame(t, 65536);
  pn_sasl_t *sasl = pn_sasl(t);
  if (o->user) {
    pn_connection_set_user(p->connection, o->user);
    pn_connection_set_password(p->connection, o->password);
    pn_sasl_allowed_mechs(sasl, "PLAIN");
    pn_sasl_set_allow_insecure_mechs(sasl, true); /* loopback benchmark brokers, no TLS */
  } else {
    pn_sasl_allowed_mechs(sasl, "ANONYMOUS");
  }
  pthread_mutex_lock(&r->lock);
  p->started = true;
  pn_proactor_connect2(r->proactor, p->connection, t, r->proactor_address);
  pthread_mutex_unlock(&r->lock);
}

static uint64_t sum(run_t *r, peer_t *peers, int n, size_t field) {
  (void)r;
  uint64_t total = 0;
  for (int i = 0; i < n; i++) total += atomic_load_explicit((_Atomic uint64_t *)((char *)&peers[i] + field), memory_order_relaxed);
  return total;
}
#define SUM(r, peers, n, field) sum((r), (peers), (n), offsetof(peer_t, field))

static uint64_t latest(peer_t *peers, int n, size_t field) {
  uint64_t t = 0;
  for (int i = 0; i < n; i++) {
    uint64_t v = atomic_load_explicit((_Atomic uint64_t *)((char *)&peers[i] + field), memory_order_relaxed);
    if (v > t) t = v;
  }
  return t;
}

/* Runs on whichever thread got the timeout (one at a time): moves phases on. */
static void tick(run_t *r) {
  const options_t *o = r->o;
  uint64_t now = now_ns();
  int S = o->senders, R = o->receivers;
  switch ((phase_t)atomic_load(&r->phase)) {
    case PHASE_ATTACHING_RECEIVERS:
      if (atomic_load(&r->receivers_attached) == R) {
        if (run_advance(r, PHASE_ATTACHING_SENDERS)) {
          for (int i = 0; i < S; i++) connect_peer(r, &r->senders[i]);
        }
      } else if (now > r->phase_deadline_ns) {
        run_abort(r, "receivers not attached within --connect-timeout");
      }
      break;
    case PHASE_ATTACHING_SENDERS:
      if (atomic_load(&r->senders_attached) == S) {
        r->start_ns = now; /* before the phase a sender on another thread sees, as --rate counts from it */
        if (run_advance(r, PHASE_SENDING)) {
          r->phase_deadline_ns = now + seconds_ns(o->count ? o->time_limit : o->duration);
          wake(r, ROLE_SENDER); /* credit may have come before sending was allowed */
        }
      } else if (now > r->phase_deadline_ns) {
        run_abort(r, "senders not attached within --connect-timeout");
      }
      break;
    case PHASE_SENDING: {
      if (o->rate > 0) wake(r, ROLE_SENDER); /* senders the rate held back send what it now allows */
      bool all_sent = o->count && SUM(r, r->senders, S, sent) >= o->count * (uint64_t)S;
      if (all_sent || now >= r->phase_deadline_ns) {
        if (!all_sent && o->count) errors_add("--count not sent within --time-limit");
        if (run_advance(r, PHASE_SETTLING)) {
          r->stop_ns = all_sent ? latest(r->senders, S, offsetof(peer_t, last_send_ns)) : now;
          r->phase_deadline_ns = now + seconds_ns(o->settle_timeout);
        }
      }
      break;
    }
    case PHASE_SETTLING: {
      /* Settled first: read later, `sent` can only be larger, so this never wraps. */
      uint64_t settled = SUM(r, r->senders, S, settled);
      uint64_t unsettled = SUM(r, r->senders, S, sent) - settled;
      if (unsettled == 0 || now > r->phase_deadline_ns) {
        if (unsettled) errors_add("%llu sends unsettled after --settle-timeout", (unsigned long long)unsettled);
        if (run_advance(r, PHASE_DRAINING)) r->phase_deadline_ns = now + seconds_ns(o->drain_timeout);
      }
      break;
    }
    case PHASE_DRAINING: {
      uint64_t accepted = SUM(r, r->senders, S, accepted);
      /* Received last, for the same reason: it only grows, and bounds the others. */
      uint64_t not_counted = SUM(r, r->receivers, R, duplicates) + SUM(r, r->receivers, R, foreign);
      uint64_t counted = SUM(r, r->receivers, R, received) - not_counted;
      if (counted >= accepted || now > r->phase_deadline_ns) {
        if (counted < accepted) errors_add("%llu accepted messages not received within --drain-timeout", (unsigned long long)(accepted - counted));
        run_advance(r, PHASE_CLOSING);
      }
      break;
    }
    case PHASE_CLOSING:
      if (r->close_attempts == 0) {
        r->close_attempts = 1;
        r->phase_deadline_ns = now + CLOSE_GRACE_NS;
        wake(r, -1);
      } else if (live_connections(r) == 0) {
        run_advance(r, PHASE_DONE);
      } else if (now > r->phase_deadline_ns) {
        if (r->close_attempts == 1) {
          /* A broker that does not answer our close: drop the sockets. */
          errors_add("connections not closed within %d s; disconnecting", (int)(CLOSE_GRACE_NS / 1000000000));
          pn_proactor_disconnect(r->proactor, NULL);
          r->close_attempts = 2;
          r->phase_deadline_ns = now + CLOSE_GRACE_NS;
        } else {
          errors_add("connections still open after disconnect; giving up on them");
          run_advance(r, PHASE_DONE);
        }
      }
      break;
    case PHASE_DONE:
      break;
  }
  if (atomic_load(&r->phase) == PHASE_DONE) {
    pn_proactor_interrupt(r->proactor); /* each thread that stops passes it on (serve) */
  } else {
    pn_proactor_set_timeout(r->proactor, TICK_MS);
  }
}

/* The remote end closed something: an error unless we were closing anyway. */
static void on_remote_close(run_t *r, peer_t *p, const char *what, pn_condition_t *cond) {
  bool closing = atomic_load(&r->phase) >= PHASE_CLOSING;
  if (pn_condition_is_set(cond)) {
    const char *name = pn_condition_get_name(cond);
    const char *desc = pn_condition_get_description(cond);
    errors_add("%s %d: %s closed by the broker: %s: %s", p->role == ROLE_SENDER ? "sender" : "receiver", p->index, what, name ? name : "", desc ? desc : "");
    run_abort(r, NULL);
  } else if (!closing) {
    errors_add("%s %d: %s closed by the broker during the run", p->role == ROLE_SENDER ? "sender" : "receiver", p->index, what);
    run_abort(r, NULL);
  }
}

int configure_terminus(pn_terminus_t *t, const options_t *o, const char *address) {
  if (!t || pn_terminus_set_address(t, address) != 0) {
    errors_add("pn_terminus_set_address failed for '%s'", address);
    return -1;
  }
  /* durable=2 (unsettled-state): RabbitMQ 3.10 then declares a durable queue. */
  if (o->terminus_durable && pn_terminus_set_durability(t, PN_DELIVERIES) != 0) {
    errors_add("pn_terminus_set_durability failed");
    return -1;
  }
  return 0;
}

static void on_connection_init(run_t *r, peer_t *p) {
  pn_connection_open(p->connection);
  pn_session_t *session = pn_session(p->connection);
  if (!session) {
    run_abort(r, "pn_session failed");
    return;
  }
  pn_session_open(session);
  int rc = p->role == ROLE_SENDER ? sender_open_link(p, session) : receiver_open_link(p, session);
  if (rc != 0) run_abort(r, NULL);
}

/* Handles one event; returns false when this thread should stop serving. */
static bool on_event(run_t *r, pn_event_t *e) {
  pn_connection_t *c = pn_event_connection(e);
  peer_t *p = c ? pn_connection_get_context(c) : NULL;
  switch (pn_event_type(e)) {
    case PN_PROACTOR_TIMEOUT:
      tick(r);
      break;
    case PN_PROACTOR_INTERRUPT:
    case PN_PROACTOR_INACTIVE:
      return false;
    case PN_CONNECTION_INIT:
      if (p) on_connection_init(r, p);
      break;
    case PN_LINK_REMOTE_OPEN:
      if (p && !p->attached) {
        p->attached = true;
        atomic_fetch_add(p->role == ROLE_SENDER ? &r->senders_attached : &r->receivers_attached, 1);
      }
      break;
    case PN_LINK_FLOW:
      if (p && p->role == ROLE_SENDER) sender_pump(p);
      break;
    case PN_DELIVERY:
      if (!p) break;
      if (p->role == ROLE_SENDER) sender_on_outcome(p, pn_event_delivery(e));
      else receiver_on_delivery(p, pn_event_delivery(e));
      break;
    case PN_CONNECTION_WAKE:
      if (!p) break;
      if (atomic_load(&r->phase) >= PHASE_CLOSING) pn_connection_close(c);
      else if (p->role == ROLE_SENDER) sender_pump(p);
      break;
    case PN_LINK_REMOTE_CLOSE:
    case PN_LINK_REMOTE_DETACH:
      if (p) on_remote_close(r, p, "link", pn_link_remote_condition(pn_event_link(e)));
      pn_link_close(pn_event_link(e));
      break;
    case PN_SESSION_REMOTE_CLOSE:
      if (p) on_remote_close(r, p, "session", pn_session_remote_condition(pn_event_session(e)));
      pn_session_close(pn_event_session(e));
      break;
    case PN_CONNECTION_REMOTE_CLOSE:
      if (p) on_remote_close(r, p, "connection", pn_connection_remote_condition(c));
      pn_connection_close(c);
      break;
    case PN_TRANSPORT_CLOSED: {
      pn_condition_t *cond = pn_transport_condition(pn_event_transport(e));
      if (p) {
        bool closing = atomic_load(&r->phase) >= PHASE_CLOSING;
        if (!closing) {
          const char *desc = pn_condition_is_set(cond) ? pn_condition_get_description(cond) : "closed";
          errors_add("%s %d: connection lost: %s", p->role == ROLE_SENDER ? "sender" : "receiver", p->index, desc ? desc : "");
          run_abort(r, NULL);
        }
        pthread_mutex_lock(&r->lock);
        p->gone = true;
        p->link = NULL;
        pthread_mutex_unlock(&r->lock);
      }
      break;
    }
    default:
      break;
  }
  return true;
}

/* Serves the proactor until told to stop. The thread that started the run (`last`)
 * stops only once it is the last one serving: when it left first, a thread still in
 * pn_proactor_wait sometimes never woke again (seen in gdb: waiting on the
 * proactor's condition variable, every later interrupt unseen) and the run hung
 * with every count in. It passes the stop on and serves until the others are gone. */
static void serve_until_stopped(run_t *r, bool last) {
  for (bool more = true; more;) {
    pn_event_batch_t *batch = pn_proactor_wait(r->proactor);
    pn_event_t *e;
    while ((e = pn_event_batch_next(batch))) {
      if (!on_event(r, e)) more = false;
    }
    pn_proactor_done(r->proactor, batch);
    if (!more && last && atomic_load(&r->serving) > 1) {
      pn_proactor_interrupt(r->proactor); /* for a thread still serving */
      more = true;
    }
  }
  /* Interrupts issued together may be delivered as one: pass it on to the next thread. */
  if (atomic_fetch_sub(&r->serving, 1) > 1) pn_proactor_interrupt(r->proactor);
}

static void *serve(void *arg) {
  serve_until_stopped(arg, false);
  return NULL;
}

int run_init(run_t *r, const options_t *o) {
  memset(r, 0, sizeof *r);
  r->o = o;
  if (pthread_mutex_init(&r->lock, NULL) != 0) {
    errors_add("pthread_mutex_init failed");
    return -1;
  }
  atomic_store(&r->phase, PHASE_ATTACHING_RECEIVERS);
  for (int i = 0; i < LOADGEN_MAX_PEERS; i++) seqset_init(&r->seen[i]);
  r->proactor = pn_proactor();
  if (!r->proactor) {
    errors_add("pn_proactor failed");
    return -1;
  }
  int n = pn_proactor_addr(r->proactor_address, sizeof r->proactor_address, o->host, o->port);
  if (n < 0 || (size_t)n >= sizeof r->proactor_address) {
    errors_add("--host too long");
    return -1;
  }
  for (int i = 0; i < o->senders; i++) {
    r->senders[i] = (peer_t){.run = r, .role = ROLE_SENDER, .index = i};
    if (sender_init(&r->senders[i]) != 0) return -1;
  }
  for (int i = 0; i < o->receivers; i++) {
    r->receivers[i] = (peer_t){.run = r, .role = ROLE_RECEIVER, .index = i};
    if (receiver_init(&r->receivers[i]) != 0) return -1;
  }
  return 0;
}

void run_serve(run_t *r) {
  const options_t *o = r->o;
  r->phase_deadline_ns = now_ns() + seconds_ns(o->connect_timeout);
  for (int i = 0; i < o->receivers; i++) connect_peer(r, &r->receivers[i]);
  pn_proactor_set_timeout(r->proactor, TICK_MS);
  pthread_t threads[16];
  int started = 0;
  atomic_store(&r->serving, 1);
  for (int i = 1; i < o->threads; i++) {
    atomic_fetch_add(&r->serving, 1);
    if (pthread_create(&threads[started], NULL, serve, r) != 0) {
      atomic_fetch_sub(&r->serving, 1);
      errors_add("pthread_create failed; serving with %d threads", started + 1);
      break;
    }
    started++;
  }
  serve_until_stopped(r, true);
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
}

void run_free(run_t *r) {
  if (r->proactor) pn_proactor_free(r->proactor);
  r->proactor = NULL;
  for (int i = 0; i < LOADGEN_MAX_PEERS; i++) {
    message_template_free(&r->senders[i].message);
    if (r->senders[i].run) seqset_free(&r->senders[i].accepted_seqs);
    free(r->receivers[i].buffer);
    if (r->receivers[i].scratch) pn_message_free(r->receivers[i].scratch);
    seqset_free(&r->seen[i]);
  }
  pthread_mutex_destroy(&r->lock);
}
