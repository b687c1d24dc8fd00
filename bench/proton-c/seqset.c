#include "seqset.h"

#include <stdlib.h>
#include <string.h>

void seqset_init(seqset_t *s) {
  /* Default attributes: only EAGAIN/ENOMEM, on which the process cannot go on anyway. */
  if (pthread_mutex_init(&s->lock, NULL) != 0) abort();
  s->bits = NULL;
  s->nbits = 0;
}

void seqset_free(seqset_t *s) {
  free(s->bits);
  s->bits = NULL;
  s->nbits = 0;
  pthread_mutex_destroy(&s->lock);
}

/* Doubles until `seq` fits (never past the cap); false if it cannot. Lock held. */
static bool grow_to(seqset_t *s, uint64_t seq) {
  if (seq >= SEQSET_MAX_BITS) return false;
  uint64_t n = s->nbits ? s->nbits : (UINT64_C(1) << 16);
  while (n <= seq) n *= 2; /* at most 28 doublings: seq < 2^28 */
  if (n > SEQSET_MAX_BITS) n = SEQSET_MAX_BITS;
  uint8_t *bigger = realloc(s->bits, n / 8);
  if (!bigger) return false;
  memset(bigger + s->nbits / 8, 0, (n - s->nbits) / 8);
  s->bits = bigger;
  s->nbits = n;
  return true;
}

seqset_result_t seqset_add(seqset_t *s, uint64_t seq) {
  seqset_result_t r = SEQSET_UNCHECKED;
  pthread_mutex_lock(&s->lock);
  if (seq < s->nbits || grow_to(s, seq)) {
    uint8_t mask = (uint8_t)(1u << (seq & 7));
    r = (s->bits[seq >> 3] & mask) ? SEQSET_ALREADY : SEQSET_ADDED;
    s->bits[seq >> 3] |= mask;
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

bool seqset_has(seqset_t *s, uint64_t seq) {
  pthread_mutex_lock(&s->lock);
  bool has = seq < s->nbits && (s->bits[seq >> 3] & (1u << (seq & 7)));
  pthread_mutex_unlock(&s->lock);
  return has;
}
