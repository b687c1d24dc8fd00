/* A set of sequence numbers (a bitmap that grows up to a cap), for counting what
 * each sender had accepted and what the receivers saw: loss and duplicates. */
#ifndef LOADGEN_SEQSET_H
#define LOADGEN_SEQSET_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* 2^28 sequence numbers (a 32 MiB bitmap) per sender at most; later ones are "unchecked". */
#define SEQSET_MAX_BITS (UINT64_C(1) << 28)

typedef struct seqset {
  pthread_mutex_t lock; /* receivers on several threads may add to one sender's set */
  uint8_t *bits;
  uint64_t nbits;
} seqset_t;

typedef enum { SEQSET_ADDED, SEQSET_ALREADY, SEQSET_UNCHECKED } seqset_result_t;

void seqset_init(seqset_t *s);
void seqset_free(seqset_t *s);
/* UNCHECKED: past the cap, or no memory to grow; the caller counts those. */
seqset_result_t seqset_add(seqset_t *s, uint64_t seq);
bool seqset_has(seqset_t *s, uint64_t seq);

#endif
