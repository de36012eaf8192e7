"""A user's first session through the Python client that openapi-python-client generates from
openapi/openapi.json, against the server at $HERALD_URL. Every answer must decode into the model
the document promises (raise_on_unexpected_status is on, and each `.parsed` is type-checked), so
any gap between the document and the server fails here.

Run by `.ci/python-client`; the generated package `herald_client` must be importable.
"""

import os
import sys
import uuid

from herald_client import AuthenticatedClient, Client
from herald_client.api.activity import activity, activity_stats
from herald_client.api.auth import signup
from herald_client.api.contacts import get_contact, list_contacts, update_contact, upsert_contact
from herald_client.api.domains import create_domain, get_domain
from herald_client.api.events import track
from herald_client.api.projects import create_project, get_me
from herald_client.api.sending import get_email, send
from herald_client.api.topics import create_topic, list_topics
from herald_client.api.templates import (
    create_template,
    delete_template,
    duplicate_template,
    get_template,
    list_templates,
    update_template,
)
from herald_client.api.verification import verify_email
from herald_client.models import (
    ActivityPage,
    ActivityStats,
    ContactDetail,
    ContactPage,
    ContactWithMeta,
    CreateContact,
    CreateDomain,
    CreatedProject,
    CreateProject,
    CreateTemplate,
    CreateTopic,
    TemplateKind,
    Credentials,
    DomainBody,
    DuplicatedTemplate,
    EmailBody,
    ErrorBody,
    MailboxBody,
    Me,
    PublicErrorBody,
    SendRequest,
    SendResponse,
    TemplateBody,
    TemplatePage,
    TopicBody,
    TopicDefault,
    TopicSetting,
    TrackRequest,
    TrackResponse,
    UpdateContact,
    UpdateTemplate,
    UserEnvelope,
    VerifyRequest,
    VerifyResponse,
)

BASE = os.environ["HERALD_URL"]


def parsed(response, model, status=None):
    """The decoded body, which must be a `model` (and come with `status`, when given)."""
    if status is not None and response.status_code != status:
        sys.exit(f"expected {status}, got {response.status_code}: {response.content!r}")
    if not isinstance(response.parsed, model):
        sys.exit(
            f"expected a {model.__name__}, got {type(response.parsed).__name__} "
            f"({response.status_code}): {response.content!r}"
        )
    return response.parsed


def main():
    # Signup and a project, with the session cookie the signup sets.
    session = Client(base_url=BASE, raise_on_unexpected_status=True)
    email = f"owner-{uuid.uuid4().hex}@example.com"
    parsed(
        signup.sync_detailed(client=session, body=Credentials(email=email, password="correct horse battery")),
        UserEnvelope,
        201,
    )
    me = parsed(get_me.sync_detailed(client=session), Me, 200)
    assert me.email == email, me
    project = parsed(
        create_project.sync_detailed(client=session, body=CreateProject(name="Python client")),
        CreatedProject,
        201,
    )
    sk = AuthenticatedClient(base_url=BASE, token=project.secret_key, raise_on_unexpected_status=True)
    pk = AuthenticatedClient(base_url=BASE, token=project.public_key, raise_on_unexpected_status=True)

    # Contacts: create, read, change, and every page of the list.
    ids = []
    for i in range(5):
        created = parsed(
            upsert_contact.sync_detailed(client=sk, body=CreateContact(email=f"c{i}@example.com")),
            ContactWithMeta,
        )
        ids.append(created.id)
    contact = parsed(get_contact.sync_detailed(ids[0], client=sk), ContactDetail, 200)
    assert contact.email == "c0@example.com", contact
    changed = parsed(
        update_contact.sync_detailed(ids[0], client=sk, body=UpdateContact(subscribed=False)),
        ContactDetail,
        200,
    )
    assert changed.subscribed is False, changed

    # A topic, and a contact's choice for it.
    topic = parsed(
        create_topic.sync_detailed(
            client=sk, body=CreateTopic(name="News", default_subscription=TopicDefault.OPT_IN)
        ),
        TopicBody,
        201,
    )
    parsed(list_topics.sync_detailed(client=sk), list, 200)
    left = parsed(
        update_contact.sync_detailed(
            ids[1], client=sk, body=UpdateContact(topics=[TopicSetting(id=topic.id, subscribed=False)])
        ),
        ContactDetail,
        200,
    )
    assert [(t.id, t.subscribed) for t in left.topics] == [(topic.id, False)], left.topics
    seen, cursor = [], None
    while True:
        page = parsed(
            list_contacts.sync_detailed(client=sk, limit=2, **({"cursor": cursor} if cursor else {})),
            ContactPage,
            200,
        )
        seen += [c.id for c in page.data]
        cursor = page.cursor
        if not page.has_more:
            break
    assert sorted(seen) == sorted(ids), (seen, ids)

    # Track with an idempotency key, then its replay.
    body = TrackRequest(email="c1@example.com", event="signed-up")
    first = track.sync_detailed(client=pk, body=body, idempotency_key="py-1")
    first_body = parsed(first, TrackResponse, 200)
    again = track.sync_detailed(client=pk, body=body, idempotency_key="py-1")
    assert parsed(again, TrackResponse, 200).data.event == first_body.data.event
    assert again.headers.get("Idempotent-Replayed") == "true", again.headers

    # Send to two recipients, then read both emails.
    sent = parsed(
        send.sync_detailed(
            client=sk,
            body=SendRequest(
                to=["c1@example.com", MailboxBody(email="c2@example.com", name="C Two")],
                from_="hello@client-flow.test",
                subject="Hello {{email}}",
                body="<p>Hi</p>",
            ),
        ),
        SendResponse,
        200,
    )
    assert len(sent.data.emails) == 2, sent
    for e in sent.data.emails:
        parsed(get_email.sync_detailed(e.email, client=sk), EmailBody, 200)

    # Templates: create, read, list, change, duplicate, delete.
    template = parsed(
        create_template.sync_detailed(
            client=sk,
            body=CreateTemplate(name="Welcome", subject="Hi", body="<p>Hi {{email}}</p>", type_=TemplateKind.TRANSACTIONAL),
        ),
        TemplateBody,
        201,
    )
    parsed(get_template.sync_detailed(template.id, client=sk), TemplateBody, 200)
    parsed(list_templates.sync_detailed(client=sk), TemplatePage, 200)
    renamed = parsed(
        update_template.sync_detailed(template.id, client=sk, body=UpdateTemplate(name="Welcome 2")),
        TemplateBody,
        200,
    )
    assert renamed.name == "Welcome 2", renamed
    copy = parsed(duplicate_template.sync_detailed(template.id, client=sk), DuplicatedTemplate)
    for tid in (copy.id, template.id):
        response = delete_template.sync_detailed(tid, client=sk)
        assert response.status_code == 204, response

    # A sending domain, its records, and an address check.
    domain = parsed(
        create_domain.sync_detailed(client=sk, body=CreateDomain(domain="client-flow.test")),
        DomainBody,
        201,
    )
    parsed(get_domain.sync_detailed(domain.id, client=sk), DomainBody, 200)
    parsed(verify_email.sync_detailed(client=sk, body=VerifyRequest(email="ann@example.com")), VerifyResponse, 200)

    # Activity.
    parsed(activity.sync_detailed(client=sk), ActivityPage, 200)
    parsed(activity_stats.sync_detailed(client=sk, days=7), ActivityStats, 200)

    # Errors decode as the typed error bodies, without raising.
    lenient = AuthenticatedClient(base_url=BASE, token=project.secret_key)
    missing = parsed(
        get_contact.sync_detailed("con_0123456789abcdef0123456789abcdef", client=lenient), ErrorBody, 404
    )
    assert missing.error.code == "NOT_FOUND", missing
    invalid = parsed(upsert_contact.sync_detailed(client=lenient, body=CreateContact(email="nope")), ErrorBody, 422)
    assert invalid.error.code == "VALIDATION_ERROR", invalid
    assert [e.field for e in invalid.error.errors] == ["email"], invalid
    bad_send = parsed(
        send.sync_detailed(client=lenient, body=SendRequest(to="nope", subject="s", body="b")), PublicErrorBody, 422
    )
    assert bad_send.error == "VALIDATION_ERROR", bad_send
    print("python client flow: ok")


if __name__ == "__main__":
    main()
