import { useId } from "react";
import { KINDS, newRow, type Kind, type Row } from "./data";

interface Props {
  rows: Row[];
  onChange: (rows: Row[]) => void;
  /** What is wrong, by row uid (0: the data as a whole). */
  errors: Record<number, string>;
}

/** Custom data as rows of name, type and value; rows are added, changed and removed here and
 * saved by the form around it. */
export function DataEditor({ rows, onChange, errors }: Props) {
  const id = useId();
  const change = (uid: number, part: Partial<Row>) =>
    onChange(rows.map((r) => (r.uid === uid ? { ...r, ...part } : r)));

  return (
    <div className="data-editor">
      {rows.length > 0 && (
        <div className="scroll" tabIndex={0} role="region" aria-label="Custom data editor">
          <table>
            <caption className="visually-hidden">Custom data fields</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Type</th>
                <th scope="col">Value</th>
                <th scope="col">
                  <span className="visually-hidden">Remove</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.map((row, i) => {
                const n = i + 1;
                const error = errors[row.uid];
                const described = error ? `${id}-${row.uid}-error` : undefined;
                return (
                  <tr key={row.uid}>
                    <td>
                      <input
                        aria-label={`Field ${n} name`}
                        value={row.key}
                        onChange={(e) => change(row.uid, { key: e.target.value })}
                        aria-invalid={error ? true : undefined}
                        aria-describedby={described}
                      />
                    </td>
                    <td>
                      {row.kind === "other" ? (
                        "List or object"
                      ) : (
                        <select
                          aria-label={`Field ${n} type`}
                          value={row.kind}
                          onChange={(e) => {
                            const kind = e.target.value as Kind;
                            change(row.uid, { kind, value: kind === "boolean" ? "true" : row.value });
                          }}
                        >
                          {KINDS.map((k) => (
                            <option key={k.kind} value={k.kind}>
                              {k.label}
                            </option>
                          ))}
                        </select>
                      )}
                    </td>
                    <td>
                      <Value row={row} n={n} described={described} onChange={(value) => change(row.uid, { value })} />
                      {error && (
                        <small id={described} className="error">
                          {error}
                        </small>
                      )}
                    </td>
                    <td>
                      <button
                        type="button"
                        className="secondary"
                        aria-label={`Remove field ${n}${row.key ? ` (${row.key})` : ""}`}
                        onClick={() => onChange(rows.filter((r) => r.uid !== row.uid))}
                      >
                        Remove
                      </button>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {errors[0] && <p className="error">{errors[0]}</p>}
      <button type="button" className="secondary" onClick={() => onChange([...rows, newRow()])}>
        Add a field
      </button>
    </div>
  );
}

function Value({ row, n, described, onChange }: { row: Row; n: number; described?: string; onChange: (v: string) => void }) {
  const common = {
    "aria-label": `Field ${n} value`,
    "aria-describedby": described,
    "aria-invalid": described ? true : undefined,
  };
  switch (row.kind) {
    case "other":
      return <code className="block">{row.value}</code>;
    case "boolean":
      return (
        <select {...common} value={row.value} onChange={(e) => onChange(e.target.value)}>
          <option value="true">Yes</option>
          <option value="false">No</option>
        </select>
      );
    case "number":
      return <input {...common} inputMode="decimal" value={row.value} onChange={(e) => onChange(e.target.value)} />;
    case "date":
      return <input {...common} type="date" value={row.value} onChange={(e) => onChange(e.target.value)} />;
    default:
      return <input {...common} value={row.value} onChange={(e) => onChange(e.target.value)} />;
  }
}
