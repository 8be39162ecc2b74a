/**
 * Sets `req[name]` (`req.rateLimit` by default) without adding a property to the request.
 *
 * Express 5 gives each request its app's `request` object as prototype. From then on V8 shares no
 * hidden class between requests: each property added to one builds a class of its own, a copy of
 * the request's descriptor list (about 19,000 instructions, 3 % of a bare Express request, against
 * 5,000 for a WeakMap entry). So the value is kept in a WeakMap keyed by the request, and `name` is
 * an accessor (get and set) on the request's prototype chain, defined the first time a request with
 * that prototype is seen. Reading, assigning and `name in req` behave as for a property, except
 * that `name in req` is true on every request of the process's Express once one was decided
 * (undefined where none was set); `Object.keys(req)` and `Object.hasOwn(req, name)` do not list it.
 * A request handed to another copy of Express's `app.handle` directly (not mounted) gets that
 * copy's prototypes, where the accessor is not.
 *
 * Where the prototype cannot take the accessor, the value is assigned as before:
 * - a request whose prototype is a class's own (one with its own `constructor`): Node's
 *   `IncomingMessage.prototype` when there is no Express, which every server in the process shares,
 *   or a framework's class;
 * - a prototype chain that already has `name` (an Express method, another library's accessor);
 * - a prototype that is not extensible;
 * - a request that already has `name` as its own property.
 */
export class RequestProperty {
  static readonly #byName = new Map<string, RequestProperty>();

  /** One per name: every limiter in the process setting the same name shares its accessor and values. */
  static named(name: string): RequestProperty {
    let p = RequestProperty.#byName.get(name);
    if (p === undefined) RequestProperty.#byName.set(name, (p = new RequestProperty(name)));
    return p;
  }

  readonly #values = new WeakMap<object, unknown>();
  readonly #accessor: PropertyDescriptor;
  /** Whether requests of each prototype seen hold the value through the accessor. */
  readonly #protos = new WeakMap<object, boolean>();
  /** The prototype of the last request set (one per name, held strongly: a bounded cost) and whether it holds. */
  #lastProto: object | null = null;
  #lastHeld = false;

  private constructor(readonly name: string) {
    const values = this.#values;
    this.#accessor = {
      get(this: object): unknown {
        return nearest(values, this);
      },
      set(this: object, value: unknown): void {
        values.set(this, value);
      },
      enumerable: false,
      configurable: true,
    };
  }

  set(req: object, value: unknown): void {
    const proto = Object.getPrototypeOf(req) as object | null;
    if (proto !== this.#lastProto) {
      this.#lastProto = proto;
      this.#lastHeld = this.#held(proto);
    }
    if (this.#lastHeld && !Object.hasOwn(req, this.name)) this.#values.set(req, value);
    else (req as Record<string, unknown>)[this.name] = value;
  }

  #held(proto: object | null): boolean {
    if (proto === null) return false;
    let held = this.#protos.get(proto);
    if (held === undefined) {
      held = this.#take(proto);
      this.#protos.set(proto, held);
    }
    return held;
  }

  /**
   * Whether `proto` has this accessor (its own or inherited), defining it when `name` is free: on the
   * last prototype of the chain before a class's own (`express.request`, Express's documented place to
   * extend every app's requests), so a request keeps it while a mounted app swaps its prototype.
   */
  #take(proto: object): boolean {
    let target: object | undefined;
    let pastClass = false;
    for (let p: object | null = proto; p !== null; p = Object.getPrototypeOf(p) as object | null) {
      const found = Object.getOwnPropertyDescriptor(p, this.name);
      if (found !== undefined) return found.get === this.#accessor.get;
      if (!pastClass && !(pastClass = Object.hasOwn(p, 'constructor'))) target = p;
    }
    if (target === undefined || !Object.isExtensible(target)) return false;
    Object.defineProperty(target, this.name, this.#accessor);
    return true;
  }
}

/**
 * The value held for `receiver`, else for the nearest object on its prototype chain: a read through
 * another object (`Object.create(req)`, a proxy) or of a default assigned to an app's prototype.
 */
function nearest(values: WeakMap<object, unknown>, receiver: object): unknown {
  for (let o: object | null = receiver; o !== null; o = Object.getPrototypeOf(o) as object | null) {
    const v = values.get(o);
    if (v !== undefined || values.has(o)) return v;
  }
  return undefined;
}
