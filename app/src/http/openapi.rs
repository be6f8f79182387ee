//! The OpenAPI 3 document of the HTTP API, generated from the handlers' annotations and the
//! wire types, then fitted to this server's settings: the document says what this server
//! enforces, and `cargo xtask test` runs schemathesis against it to keep it so.

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, RefOr, Required, Schema};
use utoipa::{Modify, OpenApi};

use super::orders::{HOLD_HEADER, UNCHECKED_HEADER};
use super::{expiry, meta, orders, products, tokens};
use crate::state::{AppState, Settings};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "seckill-app",
        description = "Flash-sale order service: stock deduction through interchangeable strategies. \
                       Errors are `{\"error\": code, \"message\": text}`."
    ),
    paths(
        products::reset,
        products::show,
        products::accounting,
        orders::create,
        orders::status,
        orders::pay,
        orders::cancel,
        orders::expire,
        expiry::switch,
        products::reconcile,
        tokens::issue,
        meta::strategies,
        meta::noop,
        meta::healthz,
        meta::metrics,
        serve,
    ),
    modifiers(&AdminToken, &IdRules)
)]
struct ApiDoc;

/// Declares the bearer admin token of `PUT /api/products/{id}`.
struct AdminToken;

impl Modify for AdminToken {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// Gives the ids a path or a query names (`user_id`, `request_id`) the rules of the same fields
/// of a purchase's body, which the server checks them by (`http::check_id`): written once,
/// on the body's fields.
struct IdRules;

impl Modify for IdRules {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let order = api
            .components
            .as_ref()
            .and_then(|c| c.schemas.get("OrderRequest"));
        let Some(RefOr::T(Schema::Object(order))) = order else {
            return;
        };
        let rules: Vec<(&str, RefOr<Schema>)> = ["user_id", "request_id"]
            .into_iter()
            .filter_map(|name| match order.properties.get(name)? {
                RefOr::T(Schema::Object(field)) => {
                    // The rules, not the body's description of the field.
                    let mut rule = field.clone();
                    rule.description = None;
                    Some((name, RefOr::T(Schema::Object(rule))))
                }
                _ => None,
            })
            .collect();
        for operation in api.paths.paths.values_mut().flat_map(operations) {
            for parameter in operation.parameters.iter_mut().flatten() {
                if let Some((_, rule)) = rules.iter().find(|(name, _)| *name == parameter.name) {
                    parameter.schema = Some(rule.clone());
                }
            }
        }
    }
}

/// The routes of a buyer (method, path): with a buyer key, each requires a buyer token.
const BUYER_ROUTES: [(&str, &str); 5] = [
    ("post", "/api/products/{id}/orders"),
    ("get", "/api/products/{id}/orders/{request_id}"),
    ("post", "/api/products/{id}/orders/{request_id}/pay"),
    ("post", "/api/products/{id}/orders/{request_id}/cancel"),
    ("post", "/api/products/{id}/tokens"),
];

/// The document of a server running with `settings`: the largest `quantity` is its
/// `--max-quantity`, the strategies are those it offers, the admin token is required only when
/// one is configured, the buyer token when there is a buyer key (and `user_id` when there is
/// none), the fault-injection header exists only when it is honoured, and `/metrics` only when
/// the public listener serves it.
pub fn document(settings: &Settings) -> Document {
    let mut doc = ApiDoc::openapi();
    if settings.metrics_apart {
        doc.paths.paths.remove("/metrics");
    }
    let quantity = doc
        .components
        .as_mut()
        .and_then(|c| c.schemas.get_mut("OrderRequest"))
        .and_then(|order| match order {
            RefOr::T(Schema::Object(order)) => order.properties.get_mut("quantity"),
            _ => None,
        });
    if let Some(RefOr::T(Schema::Object(quantity))) = quantity {
        quantity.maximum = Some(utoipa::Number::UInt(settings.max_quantity as usize));
    }
    for operation in doc.paths.paths.values_mut().flat_map(operations) {
        if settings.admin_token.is_none() {
            operation.security = None;
        }
        if !settings.allow_fault_injection
            && let Some(parameters) = &mut operation.parameters
        {
            parameters.retain(|p| {
                !p.name.eq_ignore_ascii_case(HOLD_HEADER)
                    && !p.name.eq_ignore_ascii_case(UNCHECKED_HEADER)
            });
        }
    }
    if settings.admin_token.is_none()
        && let Some(components) = &mut doc.components
    {
        components.security_schemes.clear();
    }
    match settings.buyer_key {
        Some(_) => require_buyer_tokens(&mut doc),
        None => require_user_ids(&mut doc),
    }
    let strategy = doc
        .components
        .as_mut()
        .and_then(|c| c.schemas.get_mut("Strategy"));
    if let Some(RefOr::T(Schema::Object(strategy))) = strategy {
        strategy.enum_values = Some(
            settings
                .offered
                .iter()
                .map(|s| serde_json::Value::from(s.name()))
                .collect(),
        );
    }
    doc
}

/// Declares the buyer token and requires it on every buyer route.
fn require_buyer_tokens(doc: &mut Document) {
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(
            "buyer_token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    each_buyer_operation(doc, |operation| {
        operation.security = Some(vec![SecurityRequirement::new::<_, [&str; 0], &str>(
            "buyer_token",
            [],
        )]);
    });
}

/// Calls `act` on the operation of every buyer route the document has.
fn each_buyer_operation(doc: &mut Document, mut act: impl FnMut(&mut Operation)) {
    for (method, path) in BUYER_ROUTES {
        let Some(item) = doc.paths.paths.get_mut(path) else {
            continue;
        };
        let operation = match method {
            "get" => &mut item.get,
            _ => &mut item.post,
        };
        if let Some(operation) = operation {
            act(operation);
        }
    }
}

/// Requires the `user_id` of every buyer route — in the bodies of a purchase and of a token
/// request, in the query of the others — on a server without a buyer key, where it is the only
/// word of who the buyer is.
fn require_user_ids(doc: &mut Document) {
    if let Some(components) = &mut doc.components {
        for name in ["OrderRequest", "TokenRequest"] {
            if let Some(RefOr::T(Schema::Object(body))) = components.schemas.get_mut(name)
                && !body.required.iter().any(|field| field == "user_id")
            {
                body.required.push("user_id".into());
            }
        }
    }
    each_buyer_operation(doc, |operation| {
        for parameter in operation.parameters.iter_mut().flatten() {
            if parameter.name == "user_id" {
                parameter.required = Required::True;
            }
        }
    });
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .flatten()
}

#[utoipa::path(get, path = "/api/openapi.json", tag = "meta",
    responses((status = 200, description = "This document", content_type = "application/json")))]
pub async fn serve(State(state): State<AppState>) -> impl IntoResponse {
    Json(document(&state.settings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Strategy;

    fn settings() -> Settings {
        Settings {
            admin_token: Some("secret".into()),
            default_strategy: Strategy::Conditional,
            offered: vec![Strategy::Conditional, Strategy::Batched],
            max_quantity: 7,
            allow_fault_injection: true,
            reconcile_grace: std::time::Duration::from_secs(10),
            token_key: crate::purchase_token::TokenKey::random(),
            purchase_token_ttl: std::time::Duration::from_secs(60),
            payment_window_ms: crate::api::DEFAULT_PAYMENT_WINDOW_MS,
            sweep: crate::lifecycle::sweep::Pace {
                interval: std::time::Duration::from_secs(1),
                batch: 10,
                return_grace: std::time::Duration::from_secs(10),
            },
            buyer_key: None,
            metrics_apart: false,
            request_timeout: std::time::Duration::from_secs(10),
            rollback_retries: 0,
        }
    }

    fn json(settings: &Settings) -> serde_json::Value {
        serde_json::to_value(document(settings)).expect("serializable")
    }

    #[test]
    fn the_document_names_each_offered_strategy_by_its_wire_name() {
        let every = Settings {
            offered: Strategy::ALL.to_vec(),
            ..settings()
        };
        let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            json(&every)["components"]["schemas"]["Strategy"]["enum"],
            serde_json::json!(names)
        );
        assert_eq!(
            json(&settings())["components"]["schemas"]["Strategy"]["enum"],
            serde_json::json!(["conditional", "batched"])
        );
    }

    #[test]
    fn the_largest_quantity_is_the_configured_one() {
        let quantity =
            &json(&settings())["components"]["schemas"]["OrderRequest"]["properties"]["quantity"];
        assert_eq!(quantity["minimum"], 1);
        assert_eq!(quantity["maximum"], 7);
    }

    #[test]
    fn the_admin_token_and_the_hold_header_appear_only_when_the_server_uses_them() {
        let put = "/api/products/{id}";
        let post = "/api/products/{id}/orders";
        let hold = |doc: &serde_json::Value| {
            doc["paths"][post]["post"]["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["name"] == "X-Seckill-Hold-Ms"))
        };
        let on = json(&settings());
        assert!(on["paths"][put]["put"]["security"].is_array());
        assert!(hold(&on));
        let off = json(&Settings {
            admin_token: None,
            allow_fault_injection: false,
            ..settings()
        });
        assert!(off["paths"][put]["put"]["security"].is_null());
        assert!(off["components"]["securitySchemes"].is_null());
        assert!(!hold(&off));
    }

    #[test]
    fn metrics_are_listed_only_where_the_public_listener_serves_them() {
        assert!(json(&settings())["paths"]["/metrics"].is_object());
        let apart = json(&Settings {
            metrics_apart: true,
            ..settings()
        });
        assert!(apart["paths"]["/metrics"].is_null());
        assert!(apart["paths"]["/healthz"].is_object());
    }

    #[test]
    fn the_ids_of_a_path_or_a_query_follow_the_rules_of_a_purchases_body() {
        let doc = json(&settings());
        let body = &doc["components"]["schemas"]["OrderRequest"]["properties"];
        let purchases = BUYER_ROUTES
            .iter()
            .filter(|(_, p)| p.contains("{request_id}"));
        for (method, path) in purchases {
            let parameters = doc["paths"][path][method]["parameters"]
                .as_array()
                .expect("parameters");
            for (name, longest) in [("user_id", 64), ("request_id", 128)] {
                let schema = &parameters
                    .iter()
                    .find(|p| p["name"] == name)
                    .expect("the id")["schema"];
                assert_eq!(schema["minLength"], 1, "{path} {name}");
                assert_eq!(schema["maxLength"], longest, "{path} {name}");
                assert_eq!(schema["pattern"], body[name]["pattern"], "{path} {name}");
                assert!(schema["pattern"].is_string(), "{path} {name}");
            }
        }
    }

    #[test]
    fn the_buyer_routes_require_a_buyer_token_only_when_the_server_has_a_buyer_key() {
        let buyer = |doc: &serde_json::Value| {
            BUYER_ROUTES
                .iter()
                .map(|(method, path)| {
                    doc["paths"][path][method]["security"][0]["buyer_token"].is_array()
                })
                .collect::<Vec<_>>()
        };
        let keyed = json(&Settings {
            buyer_key: Some(crate::buyer::BuyerKey::new(b"key")),
            ..settings()
        });
        assert_eq!(buyer(&keyed), [true; 5]);
        assert!(keyed["components"]["securitySchemes"]["buyer_token"].is_object());
        assert_eq!(buyer(&json(&settings())), [false; 5]);
    }

    #[test]
    fn user_id_is_required_only_by_a_server_without_a_buyer_key() {
        let required = |doc: &serde_json::Value| {
            let schemas = &doc["components"]["schemas"];
            let bodies = ["OrderRequest", "TokenRequest"].map(|body| {
                (schemas[body]["required"].as_array())
                    .is_some_and(|fields| fields.iter().any(|f| f == "user_id"))
            });
            let queries = BUYER_ROUTES
                .iter()
                .filter(|(_, path)| path.contains("{request_id}"))
                .map(|(method, path)| {
                    let parameters = doc["paths"][path][method]["parameters"].as_array();
                    let user = parameters.and_then(|ps| ps.iter().find(|p| p["name"] == "user_id"));
                    user.expect("a user_id parameter")["required"] == true
                });
            bodies.into_iter().chain(queries).collect::<Vec<_>>()
        };
        let keyed = json(&Settings {
            buyer_key: Some(crate::buyer::BuyerKey::new(b"key")),
            ..settings()
        });
        assert_eq!(required(&keyed), [false; 5]);
        assert_eq!(required(&json(&settings())), [true; 5]);
        let user = &keyed["components"]["schemas"]["OrderRequest"]["properties"]["user_id"];
        assert_eq!(user["type"], "string", "not nullable: {user}");
    }
}
