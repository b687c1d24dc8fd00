// One dispatcher for every management operation, whoever asks: the $management node
// (and so the tandem CLI) and the web console both call perform(). The checks live
// here too, so neither edge can forget one: who may do what, what an HA backup
// refuses, and an audit line for the operations that destroy or hand over state.
import { TandemError } from '../broker/errors.js';
import type { Logger } from '../ops/log.js';
import { create, entityType, move, purge, query, read, remove, update, withoutTemporaryQueues, type AdminContext, type Attributes } from './operations.js';

/** Who asks. `via` and `remote` are for the audit line. */
export interface Requester {
  user: string | undefined;
  admin: boolean;
  connectionId: string;
  /**
   * A non-admin who may look but not touch (a console login with role `user`): READ,
   * QUERY and the status operations only. AMQP management stays admin-only.
   */
  reader?: boolean;
  via?: 'amqp' | 'console';
  remote?: string;
}

/** Extra operations beyond CRUD+QUERY+PURGE+MOVE, each given (type, name, body, requester). */
export type OperationHandler<R extends Requester = Requester> = (type: string | undefined, name: unknown, body: Attributes, requester: R) => Attributes | Promise<Attributes>;

/** Operations that change nothing: allowed to readers, and on an HA backup. */
const READ_OPERATIONS = new Set(['READ', 'QUERY', 'HA-STATUS', 'DR-STATUS', 'DR-LIST']);

/** Operations whose every use is logged with who asked (type-independent ones by name). */
function audited(operation: string, type: string | undefined): boolean {
  if (operation === 'DELETE') return type === 'queue' || type === 'connection' || type === 'exchange';
  return operation === 'PURGE' || operation === 'MOVE' || operation === 'DR-ACTIVATE' || operation === 'DR-DEL' || operation === 'HA-PROMOTE' || operation === 'HA-SETTLE-ALONE';
}

export const CORE_OPERATIONS = ['CREATE', 'READ', 'UPDATE', 'DELETE', 'QUERY', 'PURGE', 'MOVE'] as const;

export class AdminOperations<R extends Requester = Requester> {
  private readonly extra = new Map<string, OperationHandler<R>>();
  /** Set on an HA backup (and while stopping): why changes must be made elsewhere. */
  readOnlyReason: (() => string | undefined) | undefined;

  constructor(
    private readonly ctx: AdminContext,
    private readonly log: Logger,
  ) {}

  /** Register an operation such as HA-PROMOTE (name in upper case). */
  register(operation: string, handler: OperationHandler<R>): void {
    this.extra.set(operation.toUpperCase(), handler);
  }

  static isRead(operation: string): boolean {
    return READ_OPERATIONS.has(operation.toUpperCase());
  }

  /**
   * Run one operation. QUERY answers a list of objects (the AMQP edge turns it into
   * attribute names and rows). Errors are TandemErrors; anything else is a bug.
   */
  async perform(operation: string, type: string | undefined, name: unknown, body: Attributes, requester: R): Promise<unknown> {
    const op = operation.toUpperCase();
    const isRead = READ_OPERATIONS.has(op);
    if (!requester.admin && !(requester.reader && isRead)) {
      throw new TandemError(
        'TANDEM_ERR_UNAUTHORIZED',
        requester.reader
          ? `user '${requester.user ?? 'anonymous'}' may look but not change anything: ${op} needs an admin (tandem user add NAME --admin)`
          : `management needs an admin identity; user '${requester.user ?? 'anonymous'}' is not an admin (tandem user add NAME --admin)`,
      );
    }
    const readOnly = this.readOnlyReason?.();
    if (readOnly && !isRead && !op.startsWith('HA-')) throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
    const result = await this.execute(op, type, name, body, requester);
    if (audited(op, type === undefined ? undefined : shortType(type))) {
      // A move names where the messages went too.
      const to = op === 'MOVE' && typeof body.to === 'string' ? body.to : undefined;
      this.log.warn(
        { audit: true, operation: op, type, name, ...(to === undefined ? {} : { to }), user: requester.user ?? 'anonymous', via: requester.via ?? 'amqp', remote: requester.remote, connection: requester.connectionId },
        `audit: ${op}${type && type !== 'broker' ? ` ${shortType(type)}` : ''}${typeof name === 'string' && name !== 'broker' ? ` '${name}'` : ''}${to === undefined ? '' : ` to '${to}'`} by ${requester.user ?? 'anonymous'} via ${requester.via ?? 'amqp'}${requester.remote ? ` from ${requester.remote}` : ''}`,
      );
    }
    return result;
  }

  /** The operations known, for error messages. */
  get known(): string[] {
    return [...CORE_OPERATIONS, ...this.extra.keys()];
  }

  private async execute(op: string, type: string | undefined, name: unknown, body: Attributes, requester: R): Promise<unknown> {
    const handler = this.extra.get(op);
    if (handler) return handler(type, name, body, requester);
    switch (op) {
      case 'CREATE':
        return create(this.ctx, entityType(type), name, body);
      case 'READ':
        return read(this.ctx, entityType(type), name);
      case 'UPDATE':
        return update(this.ctx, entityType(type), name, body);
      case 'DELETE':
        return remove(this.ctx, entityType(type), name, body);
      case 'QUERY': {
        const kind = entityType(type);
        const rows = query(this.ctx, kind);
        // A reader sees every queue but the temporary ones: their names let anyone write to them.
        return kind === 'queue' && !requester.admin ? withoutTemporaryQueues(rows) : rows;
      }
      case 'PURGE':
        return purge(this.ctx, name, body);
      case 'MOVE':
        return move(this.ctx, name, body);
      default:
        throw new TandemError('TANDEM_ERR_NOT_IMPLEMENTED', `unknown operation '${op}'; known: ${this.known.join(', ')}`);
    }
  }
}

function shortType(type: string): string {
  return type.replace(/^org\.apache\.qpid\.broker:/, '');
}
