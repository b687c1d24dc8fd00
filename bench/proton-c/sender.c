/* A sender: keeps up to `window` unsettled messages in flight against the credit
 * the broker gives, and counts each outcome. */
#include "errors.h"
#include "run.h"

#include <proton/delivery.h>
#include <proton/disposition.h>
#include <proton/link.h>
#include <proton/session.h>
#include <proton/terminus.h>
#include <string.h>

int sender_init(peer_t *s) {
  seqset_init(&s->accepted_seqs);
  const options_t *o = s->run->o;
  return message_template_init(&s->message, o->durable, o->size, (uint32_t)s->index, o->message_id ? o->id_base : 0, o->message_id_string, o->jms_shape ? o->send_address : NULL);
}

int sender_open_link(peer_t *s, pn_session_t *session) {
  const options_t *o = s->run->o;
  char name[64];
  snprintf(name, sizeof name, "loadgen-sender-%d", s->index);
  s->link = pn_sender(session, name);
  if (!s->link || configure_terminus(pn_link_target(s->link), o, o->send_address) != 0) return -1;
  pn_link_set_snd_settle_mode(s->link, PN_SND_UNSETTLED); /* at-least-once: every send gets an outcome */
  pn_link_set_rcv_settle_mode(s->link, PN_RCV_FIRST);
  pn_link_open(s->link);
  return 0;
}

void sender_pump(peer_t *s) {
  run_t *r = s->run;
  const options_t *o = r->o;
  if (!s->link || atomic_load(&r->phase) != PHASE_SENDING) return;
  uint64_t sent = atomic_load_explicit(&s->sent, memory_order_relaxed);
  uint64_t settled = atomic_load_explicit(&s->settled, memory_order_relaxed);
  /* --rate: no further than this sender's share of the rate times the time since
   * sending began (the tick wakes senders held back by it). */
  uint64_t allowed = UINT64_MAX;
  if (o->rate > 0) allowed = 1 + (uint64_t)((double)(now_ns() - r->start_ns) / 1e9 * (double)o->rate / o->senders);
  /* At most one window per call: the loop is bounded even if credit is huge. */
  for (int budget = o->window; budget > 0; budget--) {
    if (sent >= allowed) break;
    if (sent - settled >= (uint64_t)o->window) break;
    if (pn_link_credit(s->link) <= 0) break;
    if (o->count && sent >= o->count) break;
    message_stamp(&s->message, sent);
    char tag[8];
    memcpy(tag, &sent, sizeof tag); /* the tag is the sequence number: outcomes map back to it */
    pn_delivery(s->link, pn_dtag(tag, sizeof tag));
    ssize_t n = pn_link_send(s->link, s->message.bytes, s->message.len);
    if (n != (ssize_t)s->message.len) {
      errors_add("sender %d: pn_link_send returned %zd for %zu bytes", s->index, n, s->message.len);
      run_abort(r, NULL);
      return;
    }
    pn_link_advance(s->link);
    sent++;
    atomic_store_explicit(&s->sent, sent, memory_order_relaxed);
    atomic_store_explicit(&s->last_send_ns, now_ns(), memory_order_relaxed);
  }
}

void sender_on_outcome(peer_t *s, pn_delivery_t *d) {
  uint64_t state = pn_delivery_remote_state(d);
  if (!state && !pn_delivery_settled(d)) return; /* nothing decided yet */
  pn_delivery_tag_t tag = pn_delivery_tag(d);
  uint64_t seq = 0;
  if (tag.size == sizeof seq) memcpy(&seq, tag.start, sizeof seq);
  switch (state) {
    case PN_ACCEPTED:
      atomic_fetch_add_explicit(&s->accepted, 1, memory_order_relaxed);
      seqset_add(&s->accepted_seqs, seq);
      break;
    case PN_REJECTED:
      atomic_fetch_add_explicit(&s->rejected, 1, memory_order_relaxed);
      break;
    case PN_RELEASED:
      atomic_fetch_add_explicit(&s->released, 1, memory_order_relaxed);
      break;
    case PN_MODIFIED:
      atomic_fetch_add_explicit(&s->modified, 1, memory_order_relaxed);
      break;
    default: /* settled without an outcome, or one a queue should not give */
      atomic_fetch_add_explicit(&s->other_outcome, 1, memory_order_relaxed);
      break;
  }
  pn_delivery_settle(d);
  atomic_fetch_add_explicit(&s->settled, 1, memory_order_relaxed);
  sender_pump(s);
}
