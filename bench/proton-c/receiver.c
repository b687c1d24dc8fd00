/* A receiver: keeps `credit` messages of credit open, reads each message's stamp
 * to count duplicates, accepts and settles it. */
#include "errors.h"
#include "run.h"

#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/disposition.h>
#include <proton/link.h>
#include <proton/session.h>
#include <proton/terminus.h>
#include <stdlib.h>

/* A delivery bigger than this is not one of ours: rejected, never buffered. */
#define RECEIVER_MAX_MESSAGE (16u << 20)

int receiver_init(peer_t *rcv) {
  rcv->buffer_cap = rcv->run->o->size + 64 * 1024;
  rcv->buffer = malloc(rcv->buffer_cap);
  rcv->scratch = pn_message();
  if (!rcv->buffer || !rcv->scratch) {
    errors_add("out of memory for receiver %d", rcv->index);
    return -1;
  }
  return 0;
}

int receiver_open_link(peer_t *rcv, pn_session_t *session) {
  const options_t *o = rcv->run->o;
  char name[64];
  snprintf(name, sizeof name, "loadgen-receiver-%d", rcv->index);
  rcv->link = pn_receiver(session, name);
  if (!rcv->link || configure_terminus(pn_link_source(rcv->link), o, o->recv_address) != 0) return -1;
  pn_link_set_rcv_settle_mode(rcv->link, PN_RCV_FIRST);
  pn_link_open(rcv->link);
  pn_link_flow(rcv->link, o->credit);
  return 0;
}

/* Reads the whole (complete) delivery into the buffer; its length, or -1. */
static ssize_t read_delivery(peer_t *rcv, pn_delivery_t *d) {
  size_t pending = pn_delivery_pending(d);
  if (pending > RECEIVER_MAX_MESSAGE) return -1;
  if (pending > rcv->buffer_cap) {
    char *bigger = realloc(rcv->buffer, pending);
    if (!bigger) return -1;
    rcv->buffer = bigger;
    rcv->buffer_cap = pending;
  }
  size_t got = 0;
  /* Each call returns what remains, up to the space left: bounded by the buffer. */
  while (got < rcv->buffer_cap) {
    ssize_t n = pn_link_recv(rcv->link, rcv->buffer + got, rcv->buffer_cap - got);
    if (n == PN_EOS) return (ssize_t)got;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return pn_link_recv(rcv->link, rcv->buffer, 0) == PN_EOS ? (ssize_t)got : -1;
}

static void count_stamp(peer_t *rcv, ssize_t len) {
  run_t *r = rcv->run;
  uint32_t sender = 0;
  uint64_t seq = 0;
  if (len < 0 || message_read_stamp(rcv->scratch, rcv->buffer, (size_t)len, &sender, &seq) != 0 || sender >= (uint32_t)r->o->senders) {
    atomic_fetch_add_explicit(&rcv->foreign, 1, memory_order_relaxed);
    return;
  }
  switch (seqset_add(&r->seen[sender], seq)) {
    case SEQSET_ADDED:
      break;
    case SEQSET_ALREADY:
      atomic_fetch_add_explicit(&rcv->duplicates, 1, memory_order_relaxed);
      break;
    case SEQSET_UNCHECKED:
      atomic_fetch_add_explicit(&rcv->unchecked, 1, memory_order_relaxed);
      break;
  }
}

void receiver_on_delivery(peer_t *rcv, pn_delivery_t *d) {
  if (pn_delivery_partial(d)) {
    /* Proton buffers a delivery until it is complete: refuse to buffer one without bound. */
    if (pn_delivery_pending(d) > RECEIVER_MAX_MESSAGE) {
      errors_add("receiver %d: a delivery grew past %u bytes; closing", rcv->index, RECEIVER_MAX_MESSAGE);
      pn_connection_close(pn_session_connection(pn_link_session(rcv->link)));
      run_abort(rcv->run, NULL);
    }
    return;
  }
  if (!pn_delivery_readable(d)) return;
  if (pn_delivery_aborted(d)) {
    pn_delivery_settle(d);
    return;
  }
  ssize_t len = read_delivery(rcv, d);
  pn_link_advance(rcv->link);
  count_stamp(rcv, len);
  pn_delivery_update(d, len < 0 ? PN_REJECTED : PN_ACCEPTED);
  pn_delivery_settle(d);
  atomic_fetch_add_explicit(&rcv->received, 1, memory_order_relaxed);
  atomic_store_explicit(&rcv->last_receive_ns, now_ns(), memory_order_relaxed);
  int credit = pn_link_credit(rcv->link);
  /* Top up in halves: one flow frame per credit/2 messages, not one per message. */
  if (credit < rcv->run->o->credit / 2 + 1 && atomic_load(&rcv->run->phase) < PHASE_CLOSING) {
    pn_link_flow(rcv->link, rcv->run->o->credit - credit);
  }
}
