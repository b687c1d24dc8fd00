// The $management node: AMQP Management requests (application properties
// `operation`, `type`, `name`; attributes in the body) answered on the request's
// reply-to address with `statusCode`/`statusDescription`. Only connections
// authenticated as an admin identity may use it.
import { type ErrorCode, ErrorCatalogue, TandemError, invalidArgument } from '../broker/errors.js';
import type { AdminContext, Attributes } from '../admin/operations.js';
import { AdminOperations, type OperationHandler as AdminOperationHandler, type Requester as AdminRequester } from '../admin/dispatcher.js';
import type { Logger } from '../ops/log.js';
import { LogThrottle, suppressedField } from '../ops/log-throttle.js';
import { redact, redactValue } from '../ops/secrets.js';
import { type Plain, decodeMessage, encodeMessage } from './engine/message.js';
import type { AmqpValue } from './engine/types.js';
import { replyIdOf } from './reply-id.js';

export const MANAGEMENT_ADDRESS = '$management';

/** Extra operations beyond CRUD+QUERY, each given (type, name, body). */
export type OperationHandler = AdminOperationHandler;

export interface Requester extends AdminRequester {
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
  correlationId: AmqpValue | undefined;
  /** Set when the request's id cannot go into a reply: the request is refused for it. */
  badId: string | undefined;
}

export class ManagementNode {
  /** The operations themselves, shared with the web console (src/console). */
  readonly operations: AdminOperations;
  /**
   * Any client can send unreadable requests, or requests whose replies cannot be
   * delivered, thousands a second: the first of each kind is logged with its details,
   * then one line per interval with the count of those it stands for.
   */
  private readonly throttle = new LogThrottle();

  constructor(
    ctx: AdminContext,
    private readonly log: Logger,
  ) {
    this.operations = new AdminOperations(ctx, log);
  }

  /** Set on an HA backup: why changes must be made on the primary instead. */
  get readOnlyReason(): (() => string | undefined) | undefined {
    return this.operations.readOnlyReason;
  }

  set readOnlyReason(reason: (() => string | undefined) | undefined) {
    this.operations.readOnlyReason = reason;
  }

  /** Register an operation such as HA-PROMOTE (name in upper case). */
  register(operation: string, handler: OperationHandler): void {
    this.operations.register(operation, handler);
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
      const held = this.throttle.admit('unreadable');
      if (held !== undefined) this.log.warn({ err: (err as Error).message, conn: requester.connectionId, ...suppressedField(held) }, 'unreadable management request');
      return;
    }
    let status = 200;
    let description = 'OK';
    let errorCode: ErrorCode | undefined;
    let body: unknown = {};
    try {
      if (request.badId) throw invalidArgument(request.badId);
      // AMQP management is for admins only, readers included (the console has a read-only view).
      const result = await this.operations.perform(request.operation, request.type, request.name, request.body, { ...requester, reader: false, via: 'amqp' });
      if (request.operation === 'CREATE') status = 201;
      if (request.operation === 'DELETE') status = 204;
      body = request.operation === 'QUERY' ? asRows(result as Attributes[]) : result;
    } catch (err) {
      if (err instanceof TandemError) {
        status = err.managementStatus;
        description = err.message;
        errorCode = err.code;
      } else {
        status = ErrorCatalogue.TANDEM_ERR_INTERNAL.managementStatus;
        description = 'internal error; see the broker log';
        this.log.error({ err }, 'management operation failed');
      }
    }
    this.reply(request, status, description, body, requester, errorCode);
  }

  private reply(request: Request, status: number, description: string, body: unknown, requester: Requester, errorCode?: ErrorCode): void {
    if (!request.replyTo) return;
    let bytes: Buffer;
    try {
      bytes = this.encodeReply(request, status, description, body, errorCode);
    } catch (err) {
      // A result the encoder cannot write is our fault, not the requester's: say so.
      this.log.error({ err, operation: request.operation }, 'management reply could not be encoded');
      bytes = this.encodeReply(request, 500, 'internal error; see the broker log', {});
    }
    if (requester.replyDirect?.(request.replyTo, bytes)) return;
    try {
      requester.publishReply(request.replyTo, bytes);
    } catch (err) {
      const held = this.throttle.admit('reply not delivered');
      if (held !== undefined) {
        this.log.info({ conn: requester.connectionId, user: requester.user, replyTo: request.replyTo, reason: (err as Error).message, ...suppressedField(held) }, 'management reply not delivered');
      }
    }
  }

  private encodeReply(request: Request, status: number, description: string, body: unknown, errorCode?: ErrorCode): Buffer {
    // Replies carry status, errors and configuration: never a password (secrets.ts).
    // A failure also names its error (`errorCode`): several errors share a status (500,
    // 507), and the CLI's exit code is the error's, not the status's.
    const properties: Record<string, Plain> = { statusCode: status, statusDescription: redact(description) };
    if (errorCode) properties['errorCode'] = errorCode;
    return encodeMessage({
      correlationId: request.correlationId,
      to: request.replyTo,
      applicationProperties: properties,
      body: redactValue(body) as Plain,
    });
  }
}

/** AMQP Management's QUERY answer: attribute names once, then one row of values per entity. */
function asRows(results: Attributes[]): { attributeNames: string[]; results: unknown[][] } {
  const names = [...new Set(results.flatMap((r) => Object.keys(r)))];
  return { attributeNames: names, results: results.map((r) => names.map((n) => r[n] ?? null)) };
}

function parseRequest(bytes: Buffer): Request {
  const m = decodeMessage(bytes);
  const props = m.applicationProperties;
  const operation = props.operation;
  const id = replyIdOf(bytes);
  if (typeof operation !== 'string') throw invalidArgument('management request has no operation');
  const body = m.body && typeof m.body === 'object' && !Buffer.isBuffer(m.body) && !Array.isArray(m.body) ? (m.body as Attributes) : {};
  return {
    operation: operation.toUpperCase(),
    type: typeof props.type === 'string' ? props.type : undefined,
    name: props.name ?? props.identity,
    body,
    replyTo: typeof m.properties['reply-to'] === 'string' ? m.properties['reply-to'] : undefined,
    correlationId: id.ok ? id.id : undefined,
    badId: id.ok ? undefined : id.reason,
  };
}
