// The $management node: AMQP Management requests (application properties
// `operation`, `type`, `name`; attributes in the body) answered on the request's
// reply-to address with `statusCode`/`statusDescription`. Only connections
// authenticated as an admin identity may use it.
import rhea from 'rhea';
import { TandemError, invalidArgument } from '../broker/errors.js';
import { create, entityType, purge, query, read, remove, update, type AdminContext, type Attributes } from '../admin/operations.js';
import type { Logger } from '../ops/log.js';
import { redact, redactValue } from '../ops/secrets.js';
import { decodeMessage } from './lazy-message.js';
import { replyIdOf } from './reply-id.js';

export const MANAGEMENT_ADDRESS = '$management';

/** Extra operations beyond CRUD+QUERY, each given (type, name, body). */
export type OperationHandler = (type: string | undefined, name: unknown, body: Attributes, requester: Requester) => Attributes | Promise<Attributes>;

export interface Requester {
  user: string | undefined;
  admin: boolean;
  connectionId: string;
  /** Send a reply straight down one of the requester's own links (no queue involved). */
  replyDirect?(address: string, bytes: Buffer): boolean;
  /**
   * Put a reply on the queue or exchange named by reply-to, as a message the requester
   * sent there: the same checks (permissions, passive DR copies, the memory alarm) apply.
   */
  publishReply(address: string, bytes: Buffer): void;
}

interface Request {
  operation: string;
  type: string | undefined;
  name: unknown;
  body: Attributes;
  replyTo: string | undefined;
  /** What the reply's correlation-id will be (typed for the encoder), if anything. */
  correlationId: unknown;
  /** Set when the request's id cannot go into a reply: the request is refused for it. */
  badId: string | undefined;
}

const statusOf: Record<string, number> = {
  TANDEM_ERR_NOT_FOUND: 404,
  TANDEM_ERR_ALREADY_EXISTS: 409,
  TANDEM_ERR_INVALID_ARGUMENT: 400,
  TANDEM_ERR_UNAUTHORIZED: 401,
  TANDEM_ERR_NOT_IMPLEMENTED: 501,
  TANDEM_ERR_PRECONDITION: 412,
  TANDEM_ERR_QUEUE_FULL: 507,
};

export class ManagementNode {
  private readonly extra = new Map<string, OperationHandler>();
  /** Set on an HA backup: why changes must be made on the primary instead. */
  readOnlyReason: (() => string | undefined) | undefined;

  constructor(
    private readonly ctx: AdminContext,
    private readonly log: Logger,
  ) {}

  /** Register an operation such as HA-PROMOTE (name in upper case). */
  register(operation: string, handler: OperationHandler): void {
    this.extra.set(operation.toUpperCase(), handler);
  }

  /**
   * Handle one request; the reply goes to its reply-to address. Never rejects: the
   * caller does not wait for it, and a rejection nobody handles ends the process.
   */
  async handle(bytes: Buffer, requester: Requester): Promise<void> {
    try {
      await this.answer(bytes, requester);
    } catch (err) {
      this.log.error({ err }, 'management request failed');
    }
  }

  private async answer(bytes: Buffer, requester: Requester): Promise<void> {
    let request: Request;
    try {
      request = parseRequest(bytes);
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'unreadable management request');
      return;
    }
    let status = 200;
    let description = 'OK';
    let body: unknown = {};
    try {
      if (request.badId) throw invalidArgument(request.badId);
      if (!requester.admin) {
        throw new TandemError(
          'TANDEM_ERR_UNAUTHORIZED',
          `management needs an admin identity; user '${requester.user ?? 'anonymous'}' is not an admin (tandem user add NAME --admin)`,
        );
      }
      const readOnly = this.readOnlyReason?.();
      if (readOnly && !['READ', 'QUERY'].includes(request.operation) && !request.operation.startsWith('HA-')) {
        throw new TandemError('TANDEM_ERR_PRECONDITION', readOnly);
      }
      const result = await this.execute(request, requester);
      if (request.operation === 'CREATE') status = 201;
      if (request.operation === 'DELETE') status = 204;
      body = result;
    } catch (err) {
      if (err instanceof TandemError) {
        status = statusOf[err.code] ?? 500;
        description = err.message;
      } else {
        status = 500;
        description = 'internal error; see the broker log';
        this.log.error({ err }, 'management operation failed');
      }
    }
    this.reply(request, status, description, body, requester);
  }

  private async execute(request: Request, requester: Requester): Promise<unknown> {
    const op = request.operation;
    const handler = this.extra.get(op);
    if (handler) return handler(request.type, request.name, request.body, requester);
    switch (op) {
      case 'CREATE':
        return create(this.ctx, entityType(request.type), request.name, request.body);
      case 'READ':
        return read(this.ctx, entityType(request.type), request.name);
      case 'UPDATE':
        return update(this.ctx, entityType(request.type), request.name, request.body);
      case 'DELETE':
        return remove(this.ctx, entityType(request.type), request.name, request.body);
      case 'QUERY': {
        const results = query(this.ctx, entityType(request.type));
        const names = [...new Set(results.flatMap((r) => Object.keys(r)))];
        return { attributeNames: names, results: results.map((r) => names.map((n) => r[n] ?? null)) };
      }
      case 'PURGE':
        return purge(this.ctx, request.name, request.body);
      default:
        throw new TandemError(
          'TANDEM_ERR_NOT_IMPLEMENTED',
          `unknown operation '${op}'; known: CREATE, READ, UPDATE, DELETE, QUERY, PURGE${this.extra.size ? ', ' + [...this.extra.keys()].join(', ') : ''}`,
        );
    }
  }

  private reply(request: Request, status: number, description: string, body: unknown, requester: Requester): void {
    if (!request.replyTo) return;
    let bytes: Buffer;
    try {
      bytes = this.encodeReply(request, status, description, body);
    } catch (err) {
      // A result the encoder cannot write is our fault, not the requester's: say so.
      this.log.error({ err, operation: request.operation }, 'management reply could not be encoded');
      bytes = this.encodeReply(request, 500, 'internal error; see the broker log', {});
    }
    if (requester.replyDirect?.(request.replyTo, bytes)) return;
    try {
      requester.publishReply(request.replyTo, bytes);
    } catch (err) {
      this.log.info({ conn: requester.connectionId, user: requester.user, replyTo: request.replyTo, reason: (err as Error).message }, 'management reply not delivered');
    }
  }

  private encodeReply(request: Request, status: number, description: string, body: unknown): Buffer {
    // Replies carry status, errors and configuration: never a password (secrets.ts).
    return rhea.message.encode({
      correlation_id: request.correlationId,
      to: request.replyTo,
      application_properties: { statusCode: status, statusDescription: redact(description) },
      body: redactValue(body),
    } as never) as Buffer;
  }
}

function parseRequest(bytes: Buffer): Request {
  const m = decodeMessage(bytes);
  const props = (m.application_properties ?? {}) as Record<string, unknown>;
  const operation = props.operation;
  const id = replyIdOf(bytes);
  if (typeof operation !== 'string') throw invalidArgument('management request has no operation');
  const body = m.body && typeof m.body === 'object' && !Buffer.isBuffer(m.body) && !Array.isArray(m.body) ? (m.body as Attributes) : {};
  return {
    operation: operation.toUpperCase(),
    type: typeof props.type === 'string' ? props.type : undefined,
    name: props.name ?? props.identity,
    body,
    replyTo: typeof m.reply_to === 'string' ? m.reply_to : undefined,
    correlationId: id.ok ? id.id : undefined,
    badId: id.ok ? undefined : id.reason,
  };
}
