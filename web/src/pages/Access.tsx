import { useEffect, useState, type FormEvent } from "react";
import { Link, Navigate, useLocation, useNavigate, useSearchParams } from "react-router";
import { api, errorMessage, type Schemas } from "../api/client";
import { useSession } from "../session";
import { Alert, Field } from "./parts";

/** Log in with email and password. */
export function Login() {
  const { me, reload } = useSession();
  const navigate = useNavigate();
  const from = (useLocation().state as { from?: string } | null)?.from ?? "/";
  const [error, setError] = useState<string | null>(null);
  if (me) return <Navigate to={from} replace />;

  async function submit(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const { error } = await api.POST("/auth/login", {
      body: { email: String(form.get("email")), password: String(form.get("password")) },
    });
    if (error) return setError(errorMessage(error));
    await reload();
    navigate(from);
  }

  return (
    <section className="narrow">
      <h1>Log in</h1>
      <form onSubmit={(e) => void submit(e)}>
        <Field label="Email" name="email" type="email" autoComplete="email" required />
        <Field label="Password" name="password" type="password" autoComplete="current-password" required />
        <Alert message={error} />
        <button type="submit">Log in</button>
      </form>
      <OAuthButtons />
      <p>
        New to Herald? <Link to="/signup">Create an account</Link>
      </p>
      <p>
        <Link to="/reset-password">Forgot your password?</Link>
      </p>
    </section>
  );
}

/** Create an account (through an invitation when the link carries one). */
export function Signup() {
  const { me, reload } = useSession();
  const navigate = useNavigate();
  const [params] = useSearchParams();
  const [error, setError] = useState<string | null>(null);
  if (me) return <Navigate to="/" replace />;

  async function submit(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = new FormData(e.currentTarget);
    const { error } = await api.POST("/auth/signup", {
      body: {
        email: String(form.get("email")),
        password: String(form.get("password")),
        invitation: params.get("invitation"),
      },
    });
    if (error) return setError(errorMessage(error));
    await reload();
    navigate("/");
  }

  return (
    <section className="narrow">
      <h1>Create your account</h1>
      <form onSubmit={(e) => void submit(e)}>
        <Field label="Email" name="email" type="email" autoComplete="email" required />
        <Field
          label="Password"
          name="password"
          type="password"
          autoComplete="new-password"
          minLength={8}
          hint="At least 8 characters."
          required
        />
        <Alert message={error} />
        <button type="submit">Create account</button>
      </form>
      <p>
        Already have an account? <Link to="/login">Log in</Link>
      </p>
    </section>
  );
}

/** "Continue with <provider>" for each sign-in provider the deployment configures; nothing without one. */
function OAuthButtons() {
  const [providers, setProviders] = useState<Schemas["OAuthProviderBody"][]>([]);
  useEffect(() => {
    let live = true;
    void api.GET("/auth/oauth-config").then(({ data }) => {
      if (live && data) setProviders(data.providers);
    });
    return () => {
      live = false;
    };
  }, []);
  if (providers.length === 0) return null;
  return (
    <ul className="oauth" aria-label="Other ways to log in">
      {providers.map((p) => (
        <li key={p.id}>
          {/* A full page load: the server starts the provider's flow. */}
          <a className="button" href={p.url || `/auth/oauth/${encodeURIComponent(p.id)}`}>
            Continue with {p.name}
          </a>
        </li>
      ))}
    </ul>
  );
}
