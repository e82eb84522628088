/** Marks every GmlakeError, whichever installed copy of this package made it. */
const BRAND = Symbol.for("@gmlake/errors/GmlakeError");

/**
 * The base of every error the gmlake packages throw (VmmError, ChunkPoolError,
 * StitchError, SnapshotError, TraceFormatError, OutputError, the CLI's UsageError): a
 * one-line message and a `code` from the package's own typed union (a VmmError's is the
 * CUDA error name). Handle them by class:
 *
 *   catch (e) { if (e instanceof StitchError && e.code === "BAD_OPTION") ... }
 *
 * `instanceof` holds across two installed copies of a package too (a policy package that
 * resolved its own @gmlake/stitch): a class matches an error whose prototype chain has a
 * class of the same name carrying the brand Symbol.for("@gmlake/errors/GmlakeError").
 */
export abstract class GmlakeError<C extends string = string> extends Error {
  abstract readonly code: C;

  static override [Symbol.hasInstance](x: unknown): boolean {
    if (typeof x !== "object" || x === null) return false;
    if (Function.prototype[Symbol.hasInstance].call(this, x)) return true;
    if ((x as Record<symbol, unknown>)[BRAND] !== true) return false;
    if (this === GmlakeError) return true;
    // another copy's class of the same name (StitchError from another @gmlake/stitch)
    for (let p: unknown = Object.getPrototypeOf(x); p !== null && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
      if ((p as { constructor?: { name?: string } }).constructor?.name === this.name) return true;
    }
    return false;
  }
}
Object.defineProperty(GmlakeError.prototype, BRAND, { value: true });

/** The code union of an error class: ErrorCode<StitchError> = "OUT_OF_MEMORY" | "BAD_OPTION" | ... */
export type ErrorCode<E> = E extends GmlakeError<infer C> ? C : never;
