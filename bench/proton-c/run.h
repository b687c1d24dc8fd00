/* One run: its senders and receivers (one connection each), the phases it goes
 * through, and the proactor threads that serve it. */
#ifndef LOADGEN_RUN_H
#define LOADGEN_RUN_H

#include "message.h"
#include "options.h"
#include "seqset.h"

#include <proton/proactor.h>
#include <proton/terminus.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* In order; a run only moves forward. */
typedef enum {
  PHASE_ATTACHING_RECEIVERS, /* receivers first: RabbitMQ's /queue/Q declares the queue */
  PHASE_ATTACHING_SENDERS,
  PHASE_SENDING,
  PHASE_SETTLING, /* no new sends; waiting for the outcomes of those in flight */
  PHASE_DRAINING, /* waiting for receivers to get everything accepted */
  PHASE_CLOSING,
  PHASE_DONE,
} phase_t;

typedef enum { ROLE_SENDER, ROLE_RECEIVER } role_t;

typedef struct run run_t;

/* Counters are written in the peer's connection context only, and read by the
 * phase clock on another thread: hence atomics (relaxed is enough for counting). */
typedef struct peer {
  run_t *run;
  role_t role;
  int index;
  pn_connection_t *connection;
  pn_link_t *link;
  bool started; /* handed to the proactor (under run->lock) */
  bool gone;    /* transport closed: the proactor may free the connection (under run->lock) */
  bool attached;
  _Atomic uint64_t sent, settled, accepted, rejected, released, modified, other_outcome;
  _Atomic uint64_t last_send_ns;
  message_template_t message;
  seqset_t accepted_seqs;
  _Atomic uint64_t received, duplicates, foreign, unchecked;
  _Atomic uint64_t last_receive_ns;
  char *buffer;
  size_t buffer_cap;
  pn_message_t *scratch;
} peer_t;

struct run {
  const options_t *o;
  pn_proactor_t *proactor;
  _Atomic int phase;
  pthread_mutex_t lock;
  peer_t senders[LOADGEN_MAX_PEERS];
  peer_t receivers[LOADGEN_MAX_PEERS];
  seqset_t seen[LOADGEN_MAX_PEERS]; /* per sender: sequence numbers the receivers got */
  _Atomic int receivers_attached, senders_attached;
  _Atomic int serving; /* threads in serve() */
  char proactor_address[300];
  /* Phase clock's own state (only the thread handling the timeout touches it). */
  uint64_t start_ns, stop_ns, phase_deadline_ns;
  int close_attempts;
};

uint64_t now_ns(void);
/* Moves the run to `phase` unless it is already past it; returns whether it moved. */
bool run_advance(run_t *r, phase_t phase);
/* Records an error and moves to closing: a run that went wrong stops. */
void run_abort(run_t *r, const char *what);

/* Sets a link's source or target: address, and durability if asked for. 0 or -1 (error recorded). */
int configure_terminus(pn_terminus_t *t, const options_t *o, const char *address);

/* sender.c */
int sender_init(peer_t *s);
/* 0, or -1 with an error recorded. */
int sender_open_link(peer_t *s, pn_session_t *session);
void sender_pump(peer_t *s);
void sender_on_outcome(peer_t *s, pn_delivery_t *d);

/* receiver.c */
int receiver_init(peer_t *rcv);
int receiver_open_link(peer_t *rcv, pn_session_t *session);
void receiver_on_delivery(peer_t *rcv, pn_delivery_t *d);

/* run.c: connect, serve, measure; results stay in `r` for the caller to report. */
int run_init(run_t *r, const options_t *o);
void run_serve(run_t *r);
void run_free(run_t *r);

#endif
