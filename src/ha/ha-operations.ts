// The HA-* operations of the $management node (and the console): a broker's role and
// position, and the two a cluster manager (or an operator who knows) asks for.
import { TandemError } from '../broker/errors.js';
import type { Attributes } from '../admin/operations.js';
import type { OperationHandler } from '../admin/dispatcher.js';
import type { HaManager } from './ha-manager.js';
import { PROMISE_OPERATION, readPromiseRequest } from './epoch-promise.js';

export interface OperationRegistry {
  register(operation: string, handler: OperationHandler): void;
}

/** `ha` undefined: a standalone broker (ha-cluster=no); `status` answers HA-STATUS either way. */
export function registerHaOperations(m: OperationRegistry, ha: HaManager | undefined, status: () => Attributes): void {
  m.register('HA-STATUS', () => status());
  m.register('HA-PROMOTE', async (_type, _name, body) => {
    if (body['cluster-manager'] !== true) {
      throw new TandemError('TANDEM_ERR_PRECONDITION', 'promotion must come from the cluster manager (tandem ha promote --cluster-manager)');
    }
    if (!ha) throw new TandemError('TANDEM_ERR_PRECONDITION', 'this broker is standalone (ha-cluster=no): there is nothing to promote');
    return { ...(await ha.promote({ acceptDataLoss: body['accept-data-loss'] === true })) };
  });
  // A promoting broker tells the others the epoch it is about to serve (epoch-promise.ts).
  // Admin only, as every operation that changes something (src/admin/dispatcher.ts): the
  // brokers send it as ha-username, which must be an admin.
  m.register(PROMISE_OPERATION, (_type, _name, body, requester) => {
    const promise = readPromiseRequest(body);
    if (!ha) throw new TandemError('TANDEM_ERR_PRECONDITION', 'this broker is standalone (ha-cluster=no): it follows no primary');
    return { ...ha.receivePromise(promise, `${requester.user ?? 'anonymous'} (connection ${requester.connectionId})`) };
  });
  m.register('HA-SETTLE-ALONE', (_type, _name, body, requester) => {
    if (body['cluster-manager'] !== true) {
      throw new TandemError('TANDEM_ERR_PRECONDITION', 'settling alone must come from the cluster manager or an operator who knows the missing backups are stopped (tandem ha settle-alone --cluster-manager)');
    }
    if (!ha) throw new TandemError('TANDEM_ERR_PRECONDITION', 'this broker is standalone (ha-cluster=no): it always settles alone');
    return { ...ha.settleAlone(body.on !== false, `${requester.user ?? 'anonymous'} (connection ${requester.connectionId})`) };
  });
}
