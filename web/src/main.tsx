import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { createBrowserRouter, RouterProvider } from "react-router";
import { SessionProvider } from "./session";
import { Layout, NotFound, RequireLogin } from "./Layout";
import { Login, Signup } from "./pages/Access";
import { AcceptInvitation, ResetPassword, VerifyEmail } from "./pages/Tokens";
import { Projects } from "./pages/Projects";
import { Onboarding } from "./pages/Onboarding";
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
            { path: "domains", lazy: () => import("./pages/domains/Domains").then((m) => ({ Component: m.Domains })) },
            { path: "domains/:id", lazy: () => import("./pages/domains/Domain").then((m) => ({ Component: m.DomainPage })) },
            { path: "suppressions", lazy: () => import("./pages/suppressions/Suppressions").then((m) => ({ Component: m.Suppressions })) },
            { path: "topics", lazy: () => import("./pages/topics/Topics").then((m) => ({ Component: m.Topics })) },
            { path: "billing", lazy: () => import("./pages/billing/Billing").then((m) => ({ Component: m.Billing })) },
            { path: "contacts", lazy: () => import("./pages/contacts/Contacts").then((m) => ({ Component: m.Contacts })) },
            { path: "contacts/:id", lazy: () => import("./pages/contacts/Contact").then((m) => ({ Component: m.Contact })) },
            { path: "events", lazy: () => import("./pages/events/Events").then((m) => ({ Component: m.Events })) },
            { path: "events/names/:name", lazy: () => import("./pages/events/EventName").then((m) => ({ Component: m.EventName })) },
            { path: "events/activity", lazy: () => import("./pages/events/Activity").then((m) => ({ Component: m.Activity })) },
            { path: "analytics", lazy: () => import("./pages/analytics/Analytics").then((m) => ({ Component: m.Analytics })) },
            { path: "workflows", lazy: () => import("./pages/workflows/Workflows").then((m) => ({ Component: m.Workflows })) },
            { path: "workflows/:id", lazy: () => import("./pages/workflows/Workflow").then((m) => ({ Component: m.Workflow })) },
            {
              path: "workflows/:id/executions",
              lazy: () => import("./pages/workflows/Executions").then((m) => ({ Component: m.Executions })),
            },
            {
              path: "workflows/:id/executions/:executionId",
              lazy: () => import("./pages/workflows/Execution").then((m) => ({ Component: m.Execution })),
            },
            { path: "segments", lazy: () => import("./pages/segments/Segments").then((m) => ({ Component: m.Segments })) },
            { path: "segments/new", lazy: () => import("./pages/segments/SegmentForm").then((m) => ({ Component: m.SegmentForm })) },
            { path: "segments/:id", lazy: () => import("./pages/segments/Segment").then((m) => ({ Component: m.Segment })) },
            { path: "segments/:id/edit", lazy: () => import("./pages/segments/SegmentForm").then((m) => ({ Component: m.SegmentForm })) },
            { path: "campaigns", lazy: () => import("./pages/campaigns/Campaigns").then((m) => ({ Component: m.Campaigns })) },
            { path: "campaigns/new", lazy: () => import("./pages/campaigns/Campaign").then((m) => ({ Component: m.CampaignPage })) },
            { path: "campaigns/:id", lazy: () => import("./pages/campaigns/Campaign").then((m) => ({ Component: m.CampaignPage })) },
            { path: "templates", lazy: () => import("./pages/templates/Templates").then((m) => ({ Component: m.Templates })) },
            { path: "templates/:id", lazy: () => import("./pages/templates/Template").then((m) => ({ Component: m.Template })) },
            { path: "invitations/accept", element: <AcceptInvitation /> },
            { path: "settings", lazy: () => import("./pages/settings/Settings").then((m) => ({ Component: m.Settings })) },
            { path: "members", lazy: () => import("./pages/members/Members").then((m) => ({ Component: m.Members })) },
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
