/** Pasted addresses: one per line, or separated by commas, semicolons or spaces; each once. */
export function addresses(text: string): string[] {
  return [...new Set(text.split(/[\s,;]+/).map((a) => a.trim()).filter(Boolean))];
}
