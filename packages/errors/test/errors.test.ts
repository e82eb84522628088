import { describe, expect, it } from "vitest";
import { GmlakeError, type ErrorCode } from "../src/index.js";

class ThingError extends GmlakeError<"BAD_THING" | "NO_THING"> {
  override readonly name = "ThingError";
  constructor(
    readonly code: "BAD_THING" | "NO_THING",
    message: string,
  ) {
    super(message);
  }
}

/** The same class as a second installed copy of the package defines it: same name, same brand. */
function secondCopy(): typeof ThingError {
  const Base = new Function("Error", "brand", `return class GmlakeError extends Error {}`)(Error) as typeof Error;
  Object.defineProperty(Base.prototype, Symbol.for("@gmlake/errors/GmlakeError"), { value: true });
  return new Function("Base", `return class ThingError extends Base { constructor(code, m) { super(m); this.code = code; this.name = "ThingError"; } }`)(Base) as typeof ThingError;
}

describe("GmlakeError", () => {
  it("carries a typed code and is an Error", () => {
    const e = new ThingError("BAD_THING", "thing 3 is bad");
    const code: ErrorCode<ThingError> = e.code;
    expect(code).toBe("BAD_THING");
    expect(e).toBeInstanceOf(Error);
    expect(e).toBeInstanceOf(GmlakeError);
    expect(e).toBeInstanceOf(ThingError);
    expect(e.message).toBe("thing 3 is bad");
  });

  it("instanceof holds across two copies of a package, by class name and brand", () => {
    const Other = secondCopy();
    const e = new Other("NO_THING", "from the other copy");
    expect(e instanceof ThingError).toBe(true);
    expect(e instanceof GmlakeError).toBe(true);
    class OtherError extends GmlakeError<"X"> {
      readonly code = "X" as const;
    }
    expect(e instanceof OtherError).toBe(false);
    expect(new Error("plain") instanceof GmlakeError).toBe(false);
    expect((null as unknown as object) instanceof GmlakeError).toBe(false);
  });
});
