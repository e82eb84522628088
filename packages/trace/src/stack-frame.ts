/** One Python stack frame, as a snapshot's `frames` lists hold them (innermost first). */
export interface StackFrame {
  name: string;
  filename: string;
  line: number;
}
