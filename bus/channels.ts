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
