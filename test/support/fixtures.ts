import type { PolicyDoc } from '../../lib/policy.js';

/** A policy with the demo's plans, used across tests. */
export function demoPolicy(overrides: Partial<PolicyDoc> = {}): PolicyDoc {
  return {
    version: 1,
    defaultPlan: 'free',
    anonymousPlan: 'anonymous',
    plans: {
      free: {
        windows: [
          { name: 'burst', limit: 10, windowMs: 1000 },
          { name: 'sustained', limit: 100, windowMs: 60_000 },
        ],
      },
      pro: {
        windows: [
          { name: 'burst', limit: 100, windowMs: 1000 },
          { name: 'sustained', limit: 5000, windowMs: 60_000 },
        ],
      },
      hour: { windows: [{ name: 'hourly', limit: 1000, windowMs: 3_600_000 }] },
      anonymous: { windows: [{ name: 'burst', limit: 5, windowMs: 1000 }] },
    },
    routeClasses: { default: { failMode: 'open' }, payments: { failMode: 'closed' } },
    ...overrides,
  };
}

/** A fixed key-hash secret so tests can predict key ids. */
export const TEST_KEY_HASH = { versions: [{ version: 'v1', secret: 'test-secret-test-secret' }] };
