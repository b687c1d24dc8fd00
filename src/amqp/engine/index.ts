// The engine's public surface: what a host (the broker, tandem's own clients)
// uses. The codec, the tables and the state machines' insides stay behind it.
export { AmqpClient, AmqpClientError, type ClientFailure, type ClientOptions } from './client.js';
export type { Composite } from './composite.js';
export { Connection, type ConnectionOptions, type Role } from './connection.js';
export { Delivery, Outcome } from './delivery.js';
export { AmqpError, Condition, type ConditionName } from './errors.js';
export type { EngineHandler, LogHook, LogLevel } from './handler.js';
export { type AttachOptions, Link, type LinkRole, terminus } from './link.js';
export { type MessageFields, type Plain, type ReadMessage, decodeMessage, encodeMessage, fromAmqp, toAmqp } from './message.js';
export type { ErrorInfo } from './performative.js';
export type { SaslClientOptions, SaslServerOptions } from './sasl.js';
export { Session, type SessionOptions } from './session.js';
export { Transport, type TransportOptions } from './transport.js';
export type { AmqpValue } from './types.js';
