//! Spark Connect's wire, as the connect runner uses it: session settings (`Config` requests),
//! a statement as one `SqlCommand` executed with the run's tag, and its reply read as Arrow into
//! rows by column name.

use super::*;

pub(super) fn user_context(client: &SparkConnectClient) -> Option<proto::UserContext> {
    Some(proto::UserContext {
        user_id: client.user_id().unwrap_or_default().to_string(),
        ..Default::default()
    })
}

pub(super) fn config_request(
    client: &SparkConnectClient,
    operation: proto::config_request::operation::OpType,
) -> proto::ConfigRequest {
    proto::ConfigRequest {
        session_id: client.session_id().to_string(),
        user_context: user_context(client),
        operation: Some(proto::config_request::Operation {
            op_type: Some(operation),
        }),
        client_type: Some("icepack".to_string()),
        ..Default::default()
    }
}

pub(super) async fn get_option(
    client: &SparkConnectClient,
    key: &str,
) -> Result<Option<String>, Failure> {
    let request = config_request(
        client,
        proto::config_request::operation::OpType::GetOption(proto::config_request::GetOption {
            keys: vec![key.to_string()],
        }),
    );
    let response = client.config(request).await?;
    Ok(response
        .pairs
        .into_iter()
        .find(|pair| pair.key == key)
        .and_then(|pair| pair.value))
}

pub(super) async fn set_options(
    client: &SparkConnectClient,
    pairs: Vec<(String, String)>,
) -> Result<(), Failure> {
    let request = config_request(
        client,
        proto::config_request::operation::OpType::Set(proto::config_request::Set {
            pairs: pairs
                .into_iter()
                .map(|(key, value)| proto::KeyValue {
                    key,
                    value: Some(value),
                })
                .collect(),
            silent: None,
        }),
    );
    client.config(request).await?;
    Ok(())
}

pub(super) fn execute_request(
    client: &SparkConnectClient,
    plan: proto::plan::OpType,
    tag: &str,
) -> proto::ExecutePlanRequest {
    proto::ExecutePlanRequest {
        session_id: client.session_id().to_string(),
        user_context: user_context(client),
        plan: Some(proto::Plan {
            op_type: Some(plan),
        }),
        client_type: Some("icepack".to_string()),
        tags: vec![tag.to_string()],
        ..Default::default()
    }
}

/// Runs one statement exactly once and reads its rows.
pub(super) async fn execute_sql(
    client: &SparkConnectClient,
    statement: &str,
    tag: &str,
) -> Result<ResultSet, Failure> {
    let command = proto::Command {
        command_type: Some(proto::command::CommandType::SqlCommand(
            #[allow(deprecated)]
            proto::SqlCommand {
                sql: statement.to_string(),
                ..Default::default()
            },
        )),
    };
    let mut reply = Reply::default();
    read_stream(
        client,
        execute_request(client, proto::plan::OpType::Command(command), tag),
        &mut reply,
    )
    .await?;
    match reply.relation.take() {
        // A query: its plan comes back to be executed, once, for its rows.
        Some(relation) => {
            let mut rows = Reply::default();
            read_stream(
                client,
                execute_request(client, proto::plan::OpType::Root(relation), tag),
                &mut rows,
            )
            .await?;
            rows.into_result_set()
        }
        None => reply.into_result_set(),
    }
}

/// What the responses of one execution carried.
#[derive(Default)]
pub(super) struct Reply {
    columns: Option<Vec<String>>,
    rows: Vec<Vec<String>>,
    /// A query's relation, returned by `SqlCommand` to be executed.
    relation: Option<proto::Relation>,
}

impl Reply {
    fn add_arrow(&mut self, data: &[u8]) -> Result<(), Failure> {
        let reader = arrow_ipc::reader::StreamReader::try_new(Cursor::new(data), None)
            .map_err(|error| Failure::Transport(format!("unreadable Arrow result: {error}")))?;
        if self.columns.is_none() {
            self.columns = Some(
                reader
                    .schema()
                    .fields()
                    .iter()
                    .map(|field| field.name().clone())
                    .collect(),
            );
        }
        for batch in reader {
            let batch = batch
                .map_err(|error| Failure::Transport(format!("unreadable Arrow batch: {error}")))?;
            self.rows.extend(batch_rows(&batch)?);
        }
        Ok(())
    }

    fn into_result_set(self) -> Result<ResultSet, Failure> {
        Ok(ResultSet {
            columns: self.columns.unwrap_or_default(),
            rows: self.rows,
        })
    }
}

/// Every value of a batch as text (`NULL` for null), row by row.
pub(super) fn batch_rows(batch: &RecordBatch) -> Result<Vec<Vec<String>>, Failure> {
    let options = FormatOptions::default().with_null("NULL");
    let formatters = batch
        .columns()
        .iter()
        .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| Failure::Transport(format!("unreadable Arrow column: {error}")))?;
    Ok((0..batch.num_rows())
        .map(|row| {
            formatters
                .iter()
                .map(|formatter| formatter.value(row).to_string())
                .collect()
        })
        .collect())
}

pub(super) fn struct_field_names(data_type: &proto::DataType) -> Option<Vec<String>> {
    match &data_type.kind {
        Some(proto::data_type::Kind::Struct(fields)) => Some(
            fields
                .fields
                .iter()
                .map(|field| field.name.clone())
                .collect(),
        ),
        _ => None,
    }
}

pub(super) async fn read_stream(
    client: &SparkConnectClient,
    request: proto::ExecutePlanRequest,
    reply: &mut Reply,
) -> Result<(), Failure> {
    use proto::execute_plan_response::ResponseType;
    let mut stream = client.execute_plan(request).await?;
    loop {
        let message = match stream.message().await {
            Ok(Some(message)) => message,
            Ok(None) => return Ok(()),
            Err(status) => return Err(SparkError::from_grpc_status(status).into()),
        };
        if reply.columns.is_none() {
            if let Some(names) = message.schema.as_ref().and_then(struct_field_names) {
                reply.columns = Some(names);
            }
        }
        match message.response_type {
            Some(ResponseType::ArrowBatch(batch)) => reply.add_arrow(&batch.data)?,
            Some(ResponseType::SqlCommandResult(result)) => {
                let relation = result.relation.unwrap_or_default();
                match relation.rel_type {
                    Some(proto::relation::RelType::LocalRelation(local)) => {
                        if let Some(data) = local.data.filter(|data| !data.is_empty()) {
                            reply.add_arrow(&data)?;
                        } else {
                            reply.columns.get_or_insert_with(Vec::new);
                        }
                    }
                    None => {
                        reply.columns.get_or_insert_with(Vec::new);
                    }
                    Some(_) => reply.relation = Some(relation),
                }
            }
            Some(ResponseType::ResultComplete(_)) => return Ok(()),
            _ => {}
        }
    }
}

/// The kind of the statement after the `done` first ones: where a run that stopped stopped.
pub(super) fn kind_after(statements: &[Statement], done: usize) -> Option<StatementKind> {
    statements.get(done).map(|statement| statement.kind)
}

/// A broken connection as the failure of the statement it broke in.
pub(super) fn transport_error(message: String) -> ServerError {
    ServerError {
        message,
        transport: true,
        ..ServerError::default()
    }
}
