import { useEffect, useState } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert } from "../parts";
import { Confirm } from "../Confirm";
import { ContactData } from "./ContactData";
import { ContactTopics } from "./ContactTopics";
import { ContactEvents } from "./ContactEvents";
import { ContactEmails, ContactExecutions } from "./ContactHistory";

type Detail = Schemas["ContactDetail"];

/** A contact: its address and subscription, custom data (typed editor), topics, emails,
 * workflow executions and events. */
export function Contact() {
  const { id = "" } = useParams();
  const { project } = useSession();
  const navigate = useNavigate();
  const [contact, setContact] = useState<Detail | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [said, setSaid] = useState("");

  useEffect(() => {
    if (!project) return;
    let live = true;
    void api.GET("/contacts/{id}", { params: { path: { id } } }).then(({ data, error }) => {
      if (!live) return;
      setContact(data ?? null);
      setError(error ? errorMessage(error) : null);
    });
    return () => {
      live = false;
    };
  }, [project, id]);

  async function subscribe(subscribed: boolean) {
    const { data, error } = await api.PATCH("/contacts/{id}", { params: { path: { id } }, body: { subscribed } });
    setError(error ? errorMessage(error) : null);
    if (data) {
      setContact(data);
      setSaid(
        data.subscriptionPending
          ? "Asked to confirm: a confirmation email was sent."
          : data.subscribed
            ? "Subscribed."
            : "Unsubscribed.",
      );
    }
  }

  async function remove() {
    const { error } = await api.DELETE("/contacts/{id}", { params: { path: { id } } });
    if (error) setError(errorMessage(error));
    else navigate("/contacts", { state: { said: `${contact?.email ?? "The contact"} was deleted.` } });
  }

  return (
    <section>
      <p>
        <Link to="/contacts">Back to contacts</Link>
      </p>
      <Alert message={error} />
      {contact && (
        <>
          <h1>{contact.email}</h1>
          <dl className="facts">
            <dt>Subscribed</dt>
            <dd>
              {contact.subscribed ? "Yes" : contact.subscriptionPending ? "No (waiting for confirmation)" : "No"}
            </dd>
            <dt>Added</dt>
            <dd>{new Date(contact.createdAt).toLocaleString()}</dd>
            <dt>Last changed</dt>
            <dd>{new Date(contact.updatedAt).toLocaleString()}</dd>
          </dl>
          <div className="actions">
            <button type="button" className="secondary" onClick={() => void subscribe(!contact.subscribed)}>
              {contact.subscribed ? "Unsubscribe" : "Subscribe"}
            </button>
            <Confirm
              label="Delete contact"
              question={`Delete ${contact.email}, with its data and events? This cannot be undone.`}
              confirmLabel="Yes, delete the contact"
              onConfirm={remove}
            />
          </div>
          <p role="status">{said}</p>
          <ContactData contact={contact} onSaved={setContact} />
          <ContactTopics contact={contact} onSaved={setContact} />
          <ContactEmails key={`emails-${contact.id}`} contactId={contact.id} />
          <ContactExecutions key={`executions-${contact.id}`} contactId={contact.id} />
          <ContactEvents contactId={contact.id} />
        </>
      )}
    </section>
  );
}
