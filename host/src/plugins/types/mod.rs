//! Host-side values of every world, with their conversions to and from the generated WIT
//! types, so that nothing outside `plugins` names a generated binding type: one module per
//! world.

mod billing;
mod dns_verifier;
mod step;
mod transport;

pub use billing::{BillingError, BillingEvent, CheckoutRequest, Invoice, Session, Webhook};
pub use dns_verifier::{CheckedRecord, DnsRecord, RecordStatus, Requirement, SendingDomain};
pub use step::{
    Contact, Effect, Event, EventSummary, FieldError, MAX_EFFECTS, Outcome, StepInput, StepResult,
};
pub(crate) use step::{field_errors, from_wit, result_size};
pub use transport::{DeliveryError, DeliveryEvent, DeliveryEventKind, OutgoingMessage, Receipt};
