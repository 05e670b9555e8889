//! Paging through EC2's `NextToken` answers. moto answers everything in one page, real EC2 does not, so the
//! loop is written once here and tested without either.

use std::future::Future;

use kerf_core::cloud::CloudError;

/// The most pages one listing reads: far more than any account needs (e.g. 1,000 × 100 instance types),
/// and a bound if a server kept handing out tokens.
pub const MAX_PAGES: usize = 1_000;

/// Calls `page` with `None`, then with each `NextToken` it returned, until a page comes without a token;
/// returns every item in order. A token handed back twice in a row, or more than [`MAX_PAGES`] pages, is
/// an error rather than an endless loop.
pub async fn collect_pages<T, F, Fut>(
    operation: &'static str,
    mut page: F,
) -> Result<Vec<T>, CloudError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), CloudError>>,
{
    let mut items = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let (mut batch, next) = page(token.clone()).await?;
        items.append(&mut batch);
        match next.filter(|t| !t.is_empty()) {
            None => return Ok(items),
            Some(next) if Some(&next) == token.as_ref() => {
                return Err(CloudError::Api {
                    operation,
                    code: "RepeatedNextToken".into(),
                    message: format!("the server returned the same NextToken twice: {next}"),
                })
            }
            Some(next) => token = Some(next),
        }
    }
    Err(CloudError::Api {
        operation,
        code: "TooManyPages".into(),
        message: format!("more than {MAX_PAGES} pages"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    type Page = std::future::Ready<Result<(Vec<u32>, Option<String>), CloudError>>;

    /// A server that serves `items` in pages of `size`, with tokens `t<offset>`.
    fn pages(items: Vec<u32>, size: usize) -> impl FnMut(Option<String>) -> Page {
        move |token| {
            let start: usize = token.map_or(0, |t| t[1..].parse().unwrap());
            let end = (start + size).min(items.len());
            let next = (end < items.len()).then(|| format!("t{end}"));
            std::future::ready(Ok((items[start..end].to_vec(), next)))
        }
    }

    #[tokio::test]
    async fn every_page_is_read_in_order() {
        let items: Vec<u32> = (0..250).collect();
        assert_eq!(
            collect_pages("Op", pages(items.clone(), 100)).await,
            Ok(items.clone())
        );
        assert_eq!(
            collect_pages("Op", pages(items.clone(), 1000)).await,
            Ok(items)
        );
        assert_eq!(collect_pages("Op", pages(vec![], 100)).await, Ok(vec![]));
    }

    #[tokio::test]
    async fn an_empty_token_ends_the_listing() {
        let result = collect_pages("Op", |_| {
            std::future::ready(Ok((vec![1], Some(String::new()))))
        })
        .await;
        assert_eq!(result, Ok(vec![1]));
    }

    #[tokio::test]
    async fn a_repeated_token_is_an_error_not_a_loop() {
        let result: Result<Vec<u32>, _> = collect_pages("Op", |_| {
            std::future::ready(Ok((vec![], Some("same".into()))))
        })
        .await;
        assert!(matches!(result, Err(CloudError::Api { code, .. }) if code == "RepeatedNextToken"));
    }

    #[tokio::test]
    async fn endless_tokens_stop_at_the_page_limit() {
        let mut n = 0;
        let result: Result<Vec<u32>, _> = collect_pages("Op", |_| {
            n += 1;
            std::future::ready(Ok((vec![], Some(format!("t{n}")))))
        })
        .await;
        assert!(matches!(result, Err(CloudError::Api { code, .. }) if code == "TooManyPages"));
        assert_eq!(n, MAX_PAGES);
    }

    #[tokio::test]
    async fn an_error_on_a_later_page_fails_the_listing() {
        let result: Result<Vec<u32>, _> = collect_pages("Op", |token| {
            std::future::ready(match token {
                None => Ok((vec![1], Some("t1".into()))),
                Some(_) => Err(CloudError::Timeout {
                    operation: "Op",
                    after: std::time::Duration::from_secs(1),
                }),
            })
        })
        .await;
        assert!(matches!(result, Err(CloudError::Timeout { .. })));
    }
}
