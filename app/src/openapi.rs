//! The OpenAPI 3 document of the HTTP API, generated from the handlers' annotations.

use axum::Json;
use axum::response::IntoResponse;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::http::{meta, orders, products};

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
        orders::create,
        meta::strategies,
        meta::noop,
        meta::healthz,
        meta::metrics,
        serve,
    ),
    modifiers(&AdminToken)
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

/// The document served at `GET /api/openapi.json`.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

#[utoipa::path(get, path = "/api/openapi.json", tag = "meta",
    responses((status = 200, description = "This document", content_type = "application/json")))]
pub async fn serve() -> impl IntoResponse {
    Json(document())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Strategy;

    #[test]
    fn the_document_names_each_strategy_by_its_wire_name() {
        let doc = serde_json::to_value(document()).expect("serializable");
        let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            doc["components"]["schemas"]["Strategy"]["enum"],
            serde_json::json!(names)
        );
    }
}
