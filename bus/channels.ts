import type { RedisClient } from './redis-connection.js';

/**
 * One subscriber connection serving several channels: each message goes to its channel's handler.
 * ioredis subscribes the channels again after a reconnect.
 */
export class Channels {
  private readonly handlers = new Map<string, (message: string) => void>();

  constructor(private readonly sub: RedisClient) {
    sub.on('message', (channel: string, message: string) => this.handlers.get(channel)?.(message));
  }

  /** Subscribes `channel`; `onMessage` gets its messages from then on. */
  async subscribe(channel: string, onMessage: (message: string) => void): Promise<void> {
    this.handlers.set(channel, onMessage);
    await this.sub.subscribe(channel);
  }
}

/**
 * The connections a limiter's parts share with its bus: the command connection (auto-pipelined) and
 * the subscriber, instead of one pair each for the event log and the policy feed.
 */
export interface SharedRedis {
  readonly command: RedisClient;
  subscribe(channel: string, onMessage: (message: string) => void): Promise<void>;
}

/**
 * Each Redis bus's shared connections, kept beside it rather than on it: the bus's public type (the
 * package's main entry declares it) then names no ioredis type, and a gateway without ioredis still
 * typechecks.
 */
const sharedByBus = new WeakMap<object, SharedRedis>();

/** Records `bus`'s shared connections. */
export function shareConnections(bus: object, shared: SharedRedis): void {
  sharedByBus.set(bus, shared);
}

/** The connections `bus` shares, if it is a Redis bus. */
export function sharedConnections(bus: object): SharedRedis | undefined {
  return sharedByBus.get(bus);
}
