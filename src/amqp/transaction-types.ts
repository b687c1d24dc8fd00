// The AMQP 1.0 transaction types (spec part 4) as the broker reads and writes
// them: the declare/discharge bodies of coordinator messages, the
// transactional-state a transfer or disposition carries, and the declared and
// transactional-state outcomes we answer with. The engine's tables
// (engine/definitions.ts) type-check every field; this only says what they mean.
import type { Composite } from './engine/composite.js';
import { decodeComposite, describedDef } from './engine/composite.js';
import { Decoder } from './engine/decoder.js';
import { Outcome } from './engine/delivery.js';
import { AmqpError } from './engine/errors.js';
import { describedList } from './engine/performative.js';
import type { AmqpValue } from './engine/types.js';

/** The amqp-value section's descriptor code (spec 3.2.8). */
const AMQP_VALUE = 0x77n;

/**
 * What a coordinator message asks for. `other`: not a declare or discharge, or one that
 * does not decode; `unsupported`: a declare of a distributed transaction (a global-id),
 * which a coordinator without the distributed-transactions capability must not take.
 */
export type ControlBody =
  | { kind: 'declare' }
  | { kind: 'discharge'; txnId: Buffer; fail: boolean }
  | { kind: 'other'; why: string }
  | { kind: 'unsupported'; why: string };

/**
 * The transaction capabilities (spec 4.5.4) the coordinator has: local transactions, several
 * on a session, and work of one in any session of its connection (transactions are the
 * connection's). Not distributed or promotable ones.
 */
const SUPPORTED_CAPABILITIES: ReadonlySet<string> = new Set(['amqp:local-transactions', 'amqp:multi-txns-per-ssn', 'amqp:multi-ssns-per-txn']);

/** What a message on a coordinator link asks for: its amqp-value section, decoded against the tables. */
export function readControlBody(bytes: Buffer): ControlBody {
  try {
    const d = new Decoder(bytes);
    // Each turn consumes at least one byte of the message: bounded by its size.
    while (d.remaining > 0) {
      const section = d.value();
      if (section.type !== 'described' || section.descriptor.type !== 'ulong' || section.descriptor.value !== AMQP_VALUE) continue;
      const def = describedDef(section.value);
      if (def?.name === 'declare') {
        const c = decodeComposite(section.value, { name: 'declare' }, 'declare');
        if (c.fields['global-id'] !== undefined) {
          return { kind: 'unsupported', why: 'this coordinator has no distributed transactions (amqp:distributed-transactions): declare without a global-id' };
        }
        return { kind: 'declare' };
      }
      if (def?.name === 'discharge') {
        const c = decodeComposite(section.value, { name: 'discharge' }, 'discharge');
        return { kind: 'discharge', txnId: c.fields['txn-id'] as Buffer, fail: c.fields.fail === true };
      }
      return { kind: 'other', why: 'coordinator accepts only declare and discharge messages' };
    }
    return { kind: 'other', why: 'coordinator accepts only declare and discharge messages' };
  } catch (err) {
    if (err instanceof AmqpError) return { kind: 'other', why: `a coordinator message that does not decode: ${err.description}` };
    throw err;
  }
}

/** txn-id and inner outcome (its name, and the outcome itself) of a transactional-state, if `state` is one. */
export function readTransactionalState(state: Composite | undefined): { txnId: Buffer; outcome: string | undefined; outcomeState: Composite | undefined } | undefined {
  if (state?.def.name !== 'transactional-state') return undefined;
  const outcome = state.fields.outcome as Composite | undefined;
  return { txnId: state.fields['txn-id'] as Buffer, outcome: outcome?.def.name, outcomeState: outcome };
}

export function declaredState(txnId: Buffer): AmqpValue {
  return describedList('declared', { 'txn-id': txnId });
}

export function transactionalAccepted(txnId: Buffer): AmqpValue {
  return describedList('transactional-state', { 'txn-id': txnId, outcome: Outcome.accepted() });
}

/** The coordinator target we attach with: the client's capabilities that we have, none that we lack. */
export function coordinatorTarget(capabilities: unknown): AmqpValue {
  const ours = Array.isArray(capabilities) ? capabilities.filter((c) => SUPPORTED_CAPABILITIES.has(c as string)) : [];
  return describedList('coordinator', { capabilities: ours.length > 0 ? ours : undefined });
}
