import { readFileSync } from 'node:fs';
import type { EnvelopeFields } from './codec.js';
import type { RedisClient } from './redis-connection.js';

/**
 * The Redis bus's Lua scripts (`bus/lua/`), defined as commands on its connections, their typed
 * replies, and the shape of stream entries as Redis returns them.
 */

const ROUND_SCRIPT = readFileSync(new URL('./lua/round.lua', import.meta.url), 'utf8');
const SNAPSHOT_SCRIPT = readFileSync(new URL('./lua/snapshot.lua', import.meta.url), 'utf8');
const FENCE_SCRIPT = readFileSync(new URL('./lua/fence.lua', import.meta.url), 'utf8');
const APPEND_GRANTS_SCRIPT = readFileSync(new URL('./lua/append-grants.lua', import.meta.url), 'utf8');

/** Stream entries as XRANGE, XREADGROUP and XAUTOCLAIM return them (a trimmed pending one has null fields). */
export type StreamEntries = Array<[string, string[]]>;

/** What `lua/round.lua` returns. */
export type RoundReply = [now: string, members: string[], owners: string[], blind: string[], left: string[], held: string[]];

/** The scripts as commands of a connection they were defined on. */
export interface ScriptCommands {
  frlRound(...args: string[]): Promise<unknown>;
  frlSnapshot(...args: string[]): Promise<string | null>;
  frlFence(...args: string[]): Promise<[1, string, StreamEntries] | [0, string, string, string]>;
  frlAppendGrants(...args: string[]): Promise<string | null>;
}

/** Defines the round, snapshot and fence scripts: the command connection's. */
export function defineControlScripts(c: RedisClient): void {
  c.defineCommand('frlRound', { numberOfKeys: 5, lua: ROUND_SCRIPT });
  c.defineCommand('frlSnapshot', { numberOfKeys: 3, lua: SNAPSHOT_SCRIPT });
  c.defineCommand('frlFence', { numberOfKeys: 2, lua: FENCE_SCRIPT });
}

/** Defines the grant append, on each connection grants are logged on. */
export function defineGrantScript(c: RedisClient): void {
  c.defineCommand('frlAppendGrants', { numberOfKeys: 2, lua: APPEND_GRANTS_SCRIPT });
}

/** A connection's script commands (looked up at each call, so a command replaced on it is the one run). */
export function scripts(c: RedisClient): ScriptCommands {
  return c as unknown as ScriptCommands;
}

/** An envelope as the fields of a stream entry. */
export function flatFields(f: EnvelopeFields): string[] {
  return ['v', f.v, 'kid', f.kid, 't', f.t, 'b', f.b, 'mac', f.mac];
}

/** Whether stream entry id `a` (`ms-seq`) comes before `b`. */
export function streamIdBelow(a: string, b: string): boolean {
  const [am = 0, as = 0] = a.split('-').map(Number);
  const [bm = 0, bs = 0] = b.split('-').map(Number);
  return am < bm || (am === bm && as < bs);
}
