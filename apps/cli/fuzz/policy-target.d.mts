export function fuzzOne(data: Uint8Array): void;
export function seeds(): Uint8Array[];
export const dictionary: Uint8Array[];
