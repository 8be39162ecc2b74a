import { fnv1a32 } from './hash.js';

/**
 * Fixed windows with a per-key phase offset. Every node derives the same window id from the wall
 * clock, and keys do not all roll over on the same instant (no fleet-wide retry herd).
 */

/** Phase offset of a key's windows of length `windowMs`: `hash(keyId) mod windowMs`. */
export function phaseOffset(keyId: string, windowMs: number): number {
  return fnv1a32(keyId) % windowMs;
}

/** Window id: `floor((nowMs − offset) / windowMs)`. */
export function windowIdAt(nowMs: number, windowMs: number, offset: number): number {
  return Math.floor((nowMs - offset) / windowMs);
}

/** Wall-clock instant (ms) at which window `windowId` starts. */
export function windowStartMs(windowId: number, windowMs: number, offset: number): number {
  return windowId * windowMs + offset;
}

/** Wall-clock instant (ms) at which window `windowId` ends (the next one starts). */
export function windowEndMs(windowId: number, windowMs: number, offset: number): number {
  return (windowId + 1) * windowMs + offset;
}

/** Wall-clock instant (ms) at which the window of length `windowMs` running for `keyId` at `nowMs` ends. */
export function runningWindowEndMs(keyId: string, nowMs: number, windowMs: number): number {
  const offset = phaseOffset(keyId, windowMs);
  return windowEndMs(windowIdAt(nowMs, windowMs, offset), windowMs, offset);
}
