import { useState, type FormEvent } from "react";
import { Link } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { Alert, Field } from "../parts";
import { DataEditor } from "./DataEditor";
import { fieldErrors, patchOf, type Row } from "./data";

/** A form to add a contact: its address, whether it is subscribed, and custom data. */
export function NewContact({ onCreated }: { onCreated: () => void }) {
  const [rows, setRows] = useState<Row[]>([]);
  const [errors, setErrors] = useState<Record<number, string>>({});
  const [error, setError] = useState<string | null>(null);
  const [created, setCreated] = useState<Schemas["ContactWithMeta"] | null>(null);

  async function create(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = e.currentTarget;
    const values = new FormData(form);
    const { patch: data, errors } = patchOf({}, rows);
    setErrors(errors);
    if (Object.keys(errors).length > 0) {
      setError("Some fields need fixing first.");
      return;
    }
    const res = await api.POST("/contacts", {
      body: {
        email: String(values.get("email")).trim(),
        subscribed: values.get("subscribed") === "on",
        data: Object.keys(data).length > 0 ? data : undefined,
      },
    });
    if (res.error) {
      setErrors(fieldErrors(rows, res.error.error?.errors ?? []));
      setError(errorMessage(res.error));
      return;
    }
    setError(null);
    setCreated(res.data);
    setRows([]);
    form.reset();
    onCreated();
  }

  return (
    <section aria-labelledby="new-contact-title" className="card">
      <h2 id="new-contact-title">Add a contact</h2>
      <form onSubmit={(e) => void create(e)}>
        <Field label="Email address" name="email" type="email" required autoComplete="off" />
        <label className="check">
          <input type="checkbox" name="subscribed" defaultChecked /> Subscribed to marketing mail
        </label>
        <fieldset>
          <legend>Custom data</legend>
          <DataEditor rows={rows} onChange={setRows} errors={errors} />
        </fieldset>
        <Alert message={error} />
        <button type="submit">Add contact</button>
      </form>
      <p role="status">
        {created && (
          <>
            {created._meta.isNew ? "Added " : "Updated "}
            <Link to={`/contacts/${created.id}`}>{created.email}</Link>.
          </>
        )}
      </p>
    </section>
  );
}
