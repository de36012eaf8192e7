// The pages the links in account mail open: `<dashboard_url>/verify-email?token=…` and
// `<dashboard_url>/reset-password?token=…` (dashboard_url defaults to <public_url>/app).
import { useEffect, useState, type FormEvent } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";
import { api, errorMessage } from "../api/client";
import { useSession } from "../session";
import { Alert, Field } from "./parts";

/** Confirms the address of the link's token, which also logs the user in. */
export function VerifyEmail() {
  const [params] = useSearchParams();
  const { reload } = useSession();
  const token = params.get("token");
  const [state, setState] = useState<"working" | "done" | string>(token ? "working" : "This link has no token; open the link from the email again.");

  useEffect(() => {
    if (!token) return;
    let live = true;
    void api.POST("/auth/verify-email", { body: { token } }).then(async ({ error }) => {
      if (!live) return;
      if (error) return setState(errorMessage(error));
      await reload();
      setState("done");
    });
    return () => {
      live = false;
    };
  }, [token, reload]);

  return (
    <section className="narrow">
      <h1>Confirm your email</h1>
      {state === "working" && <p role="status">Confirming…</p>}
      {state === "done" && (
        <p role="status">
          Your address is confirmed. <Link to="/">Continue to Herald</Link>
        </p>
      )}
      {state !== "working" && state !== "done" && <Alert message={state} />}
    </section>
  );
}

/** Without a token: asks for the reset email. With one: sets the new password. */
export function ResetPassword() {
  const [params] = useSearchParams();
  const token = params.get("token");
  const { reload } = useSession();
  const navigate = useNavigate();
  const [error, setError] = useState<string | null>(null);
  const [sent, setSent] = useState(false);

  async function request(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const email = String(new FormData(e.currentTarget).get("email"));
    const { error } = await api.POST("/auth/request-password-reset", { body: { email } });
    if (error) return setError(errorMessage(error));
    setError(null);
    setSent(true);
  }

  async function reset(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const password = String(new FormData(e.currentTarget).get("password"));
    const { error } = await api.POST("/auth/reset-password", { body: { token: token ?? "", password } });
    if (error) return setError(errorMessage(error));
    await reload();
    navigate("/");
  }

  if (token) {
    return (
      <section className="narrow">
        <h1>Choose a new password</h1>
        <form onSubmit={(e) => void reset(e)}>
          <Field label="New password" name="password" type="password" autoComplete="new-password" minLength={8} hint="At least 8 characters." required />
          <Alert message={error} />
          <button type="submit">Set password</button>
        </form>
      </section>
    );
  }
  return (
    <section className="narrow">
      <h1>Reset your password</h1>
      {sent ? (
        <p role="status">If an account has that address, an email with a link is on its way.</p>
      ) : (
        <form onSubmit={(e) => void request(e)}>
          <Field label="Email" name="email" type="email" autoComplete="email" required />
          <Alert message={error} />
          <button type="submit">Email me a link</button>
        </form>
      )}
      <p>
        <Link to="/login">Back to log in</Link>
      </p>
    </section>
  );
}

/** `<dashboard_url>/invitations/accept?token=…`: the signed-in user joins the inviting project. */
export function AcceptInvitation() {
  const [params] = useSearchParams();
  const token = params.get("token") ?? "";
  const { reload, choose } = useSession();
  const navigate = useNavigate();
  const [error, setError] = useState<string | null>(token ? null : "This link has no token; open the link from the email again.");

  async function accept() {
    const { data, error } = await api.POST("/users/@me/invitations/accept", { body: { token } });
    if (error) return setError(errorMessage(error));
    choose(data.id);
    await reload();
    navigate("/");
  }

  return (
    <section className="narrow">
      <h1>Join a project</h1>
      <p>You were invited to a project on Herald.</p>
      <Alert message={error} />
      {token && (
        <button type="button" onClick={() => void accept()}>
          Accept the invitation
        </button>
      )}
    </section>
  );
}
