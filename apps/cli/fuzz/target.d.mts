export function fuzzOne(data: Uint8Array): void;
export function isExpected(e: unknown): boolean;
