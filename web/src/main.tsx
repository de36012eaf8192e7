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
            { path: "segments", lazy: () => import("./pages/segments/Segments").then((m) => ({ Component: m.Segments })) },
            { path: "segments/new", lazy: () => import("./pages/segments/SegmentForm").then((m) => ({ Component: m.SegmentForm })) },
            { path: "segments/:id", lazy: () => import("./pages/segments/Segment").then((m) => ({ Component: m.Segment })) },
            { path: "segments/:id/edit", lazy: () => import("./pages/segments/SegmentForm").then((m) => ({ Component: m.SegmentForm })) },
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
