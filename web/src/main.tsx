import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { createBrowserRouter, RouterProvider } from "react-router";
import { SessionProvider } from "./session";
import { Layout, NotFound, RequireLogin } from "./Layout";
import { Login, Signup } from "./pages/Access";
import { AcceptInvitation, ResetPassword, VerifyEmail } from "./pages/Tokens";
import { Projects } from "./pages/Projects";
import { Onboarding } from "./pages/Onboarding";
import { Contacts } from "./pages/Contacts";
import { Contact } from "./pages/Contact";
import "./style.css";

// The app's pages, under /app/ (herald answers index.html for each of them).
const router = createBrowserRouter(
  [
    {
      element: <Layout />,
      children: [
        { path: "login", element: <Login /> },
        { path: "signup", element: <Signup /> },
        { path: "verify-email", element: <VerifyEmail /> },
        { path: "reset-password", element: <ResetPassword /> },
        {
          element: <RequireLogin />,
          children: [
            { index: true, element: <Onboarding /> },
            { path: "projects", element: <Projects /> },
            { path: "contacts", element: <Contacts /> },
            { path: "contacts/:id", element: <Contact /> },
            { path: "templates", lazy: () => import("./pages/templates/Templates").then((m) => ({ Component: m.Templates })) },
            { path: "templates/:id", lazy: () => import("./pages/templates/Template").then((m) => ({ Component: m.Template })) },
            { path: "invitations/accept", element: <AcceptInvitation /> },
          ],
        },
        { path: "*", element: <NotFound /> },
      ],
    },
  ],
  { basename: "/app" },
);

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <SessionProvider>
      <RouterProvider router={router} />
    </SessionProvider>
  </StrictMode>,
);
