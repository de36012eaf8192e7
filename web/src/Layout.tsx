import { useEffect, useRef, useState, type KeyboardEvent } from "react";
import { Link, Navigate, NavLink, Outlet, useLocation, useNavigate } from "react-router";
import { api } from "./api/client";
import { useSession } from "./session";

/** The frame of every page: the header (with the project switcher once logged in) and main. */
export function Layout() {
  const { me, projects, project, choose, reload } = useSession();
  const navigate = useNavigate();
  const location = useLocation();
  const main = useRef<HTMLElement>(null);
  const toggle = useRef<HTMLButtonElement>(null);
  // The header: the brand, the project switcher and "Log out" on a first row, the main
  // navigation under them. On a narrow screen the navigation folds under a "Menu" button after
  // "Log out" (style.css); it is open for the page it was opened on, Escape closes it.
  const [menu, setMenu] = useState({ open: false, path: location.pathname });
  const open = menu.open && menu.path === location.pathname;

  // A new page moves the focus to its content, as a full page load would for a screen reader.
  useEffect(() => {
    main.current?.focus();
  }, [location.pathname]);

  function closeOnEscape(e: KeyboardEvent) {
    if (e.key === "Escape" && open) {
      setMenu({ open: false, path: location.pathname });
      toggle.current?.focus();
    }
  }

  async function logout() {
    await api.GET("/auth/logout");
    await reload();
    navigate("/login");
  }

  return (
    <>
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header>
        <Link to="/" className="brand">
          Herald
        </Link>
        {me && projects.length > 0 && (
          <label className="switcher">
            <span className="switcher-label">Current project</span>
            <select value={project?.id ?? ""} onChange={(e) => choose(e.target.value)}>
              {projects.map((p) => (
                <option key={p.id} value={p.id}>
                  {p.name}
                </option>
              ))}
            </select>
          </label>
        )}
        {me && (
          <button type="button" className="logout" onClick={() => void logout()}>
            Log out
          </button>
        )}
        {me && (
          <button
            type="button"
            ref={toggle}
            className="menu-toggle secondary"
            aria-expanded={open}
            aria-controls="main-menu"
            onClick={() => setMenu({ open: !open, path: location.pathname })}
            onKeyDown={closeOnEscape}
          >
            Menu
          </button>
        )}
        {me && (
          <nav
            aria-label="Main"
            id="main-menu"
            className={open ? "open" : undefined}
            onKeyDown={closeOnEscape}
          >
            <NavLink to="/" end>
              Get started
            </NavLink>
            <NavLink to="/contacts">Contacts</NavLink>
            <NavLink to="/domains">Domains</NavLink>
            <NavLink to="/suppressions">Suppressions</NavLink>
            <NavLink to="/topics">Topics</NavLink>
            <NavLink to="/billing">Billing</NavLink>
            <NavLink to="/events">Events</NavLink>
            <NavLink to="/analytics">Analytics</NavLink>
            <NavLink to="/workflows">Workflows</NavLink>
            <NavLink to="/segments">Segments</NavLink>
            <NavLink to="/campaigns">Campaigns</NavLink>
            <NavLink to="/templates">Templates</NavLink>
            <NavLink to="/projects">Projects</NavLink>
            <NavLink to="/members">Members</NavLink>
            <NavLink to="/settings">Settings</NavLink>
          </nav>
        )}
      </header>
      <main id="main" ref={main} tabIndex={-1}>
        <Outlet />
      </main>
    </>
  );
}

/** Pages for logged-in users: others go to the login page; a user without a project creates one. */
export function RequireLogin() {
  const { loading, me, project } = useSession();
  const location = useLocation();
  if (loading) return <p role="status">Loading…</p>;
  // Back to the page asked for once logged in (an invitation link, say).
  if (!me) return <Navigate to="/login" replace state={{ from: location.pathname + location.search }} />;
  if (!project && !["/projects", "/invitations/accept"].includes(location.pathname)) {
    return <Navigate to="/projects" replace />;
  }
  return <Outlet />;
}

/** A path the app does not know. */
export function NotFound() {
  return (
    <section>
      <h1>Page not found</h1>
      <p>
        <Link to="/">Go to the start page</Link>
      </p>
    </section>
  );
}
