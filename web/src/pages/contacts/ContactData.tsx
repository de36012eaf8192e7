import { useEffect, useRef, useState, type FormEvent } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { Alert } from "../parts";
import { DataEditor } from "./DataEditor";
import { fieldErrors, KINDS, kindOf, patchOf, rowsOf, type Row } from "./data";

type Detail = Schemas["ContactDetail"];

const label = (v: unknown) => KINDS.find((k) => k.kind === kindOf(v))?.label ?? "List or object";

/** A contact's custom data: shown as a table, edited with the typed editor, saved with PATCH. */
export function ContactData({ contact, onSaved }: { contact: Detail; onSaved: (c: Detail) => void }) {
  const [rows, setRows] = useState<Row[] | null>(null);
  const [errors, setErrors] = useState<Record<number, string>>({});
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  const [said, setSaid] = useState("");
  const data = Object.entries(contact.data ?? {}).sort(([a], [b]) => a.localeCompare(b));
  const editing = rows !== null;
  const form = useRef<HTMLFormElement>(null);
  const edit = useRef<HTMLButtonElement>(null);
  const opened = useRef(false);

  // The focus goes into the editor when it opens, and back to "Edit data" when it closes.
  useEffect(() => {
    if (editing) form.current?.querySelector<HTMLElement>("input, select, button")?.focus();
    else if (opened.current) edit.current?.focus();
    opened.current = editing;
  }, [editing]);

  async function save(e: FormEvent) {
    e.preventDefault();
    if (!rows) return;
    const { patch, errors } = patchOf(contact.data, rows);
    setErrors(errors);
    setSaid("");
    if (Object.keys(errors).length > 0) {
      setError("Some fields need fixing before saving.");
      return;
    }
    if (Object.keys(patch).length === 0) {
      setRows(null);
      setError(null);
      setSaid("Nothing changed.");
      return;
    }
    setSaving(true);
    const res = await api.PATCH("/contacts/{id}", { params: { path: { id: contact.id } }, body: { data: patch } });
    setSaving(false);
    if (res.error) {
      setErrors(fieldErrors(rows, res.error.error?.errors ?? []));
      setError(errorMessage(res.error));
      return;
    }
    setError(null);
    setRows(null);
    setSaid("Data saved.");
    onSaved(res.data);
  }

  return (
    <section aria-labelledby="contact-data">
      <h2 id="contact-data">Data</h2>
      {rows === null ? (
        <>
          {data.length === 0 ? (
            <p>No custom data.</p>
          ) : (
            <div className="scroll" tabIndex={0} role="region" aria-label="Custom data table">
              <table>
                <caption className="visually-hidden">Custom data</caption>
                <thead>
                  <tr>
                    <th scope="col">Field</th>
                    <th scope="col">Value</th>
                    <th scope="col">Type</th>
                  </tr>
                </thead>
                <tbody>
                  {data.map(([k, v]) => (
                    <tr key={k}>
                      <th scope="row">{k}</th>
                      <td>
                        <code>{JSON.stringify(v)}</code>
                      </td>
                      <td>{label(v)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <button type="button" ref={edit} onClick={() => setRows(rowsOf(contact.data))}>
            Edit data
          </button>
        </>
      ) : (
        <form ref={form} onSubmit={(e) => void save(e)}>
          <DataEditor rows={rows} onChange={setRows} errors={errors} />
          <Alert message={error} />
          <div className="actions">
            <button type="submit" disabled={saving}>
              Save data
            </button>
            <button
              type="button"
              className="secondary"
              onClick={() => {
                setRows(null);
                setErrors({});
                setError(null);
              }}
            >
              Cancel
            </button>
          </div>
        </form>
      )}
      <p role="status">{said}</p>
    </section>
  );
}
