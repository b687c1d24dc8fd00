// What paging does, as the broker's status answers it and as metrics: message bodies
// in memory, and those in the journal only (paged).
import type { Broker } from '../broker/broker.js';
import type { Pager } from './pager.js';

export interface PagingStatus {
  'max-memory': number;
  'resident-bytes': number;
  'paged-messages': number;
  'paged-bytes': number;
  'paged-out-total': number;
  'read-back-total': number;
}

export function pagingStatus(pager: Pager, broker: Broker): PagingStatus {
  let paged = 0;
  let pagedBytes = 0;
  for (const q of broker.queues.values()) {
    paged += q.pagedDepth;
    pagedBytes += q.pagedByteDepth;
  }
  return {
    'max-memory': pager.maxMemory,
    'resident-bytes': pager.residentBytes(),
    'paged-messages': paged,
    'paged-bytes': pagedBytes,
    'paged-out-total': pager.stats.pagedOut,
    'read-back-total': pager.stats.readBack,
  };
}

/** The same figures under their metric names (the tandem_subsystem gauge's store_* series). */
export function pagingMetrics(pager: Pager, broker: Broker): Record<string, number> {
  const m = pagingStatus(pager, broker);
  return {
    store_max_memory_bytes: m['max-memory'],
    store_resident_bytes: m['resident-bytes'],
    store_paged_messages: m['paged-messages'],
    store_paged_bytes: m['paged-bytes'],
    store_paged_out_total: m['paged-out-total'],
    store_read_back_total: m['read-back-total'],
  };
}
