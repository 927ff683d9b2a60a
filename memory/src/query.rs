//! Turning an agent's query into an FTS5 MATCH expression that can never be a syntax error.
//!
//! FTS5 gives meaning to `"`, `*`, `^`, `:`, `+`, `-`, parentheses, `AND`/`OR`/`NOT` and
//! `NEAR(`. Rather than escape each, the query is cut into words the way the unicode61
//! tokenizer cuts text (runs of letters and digits), and every word becomes a quoted string,
//! so FTS5 sees only `"word" OR "word"`. A quoted string holding only letters and digits has
//! no syntax left in it; words the tokenizer would still split or drop just become a phrase.

use crate::model::Terms;

/// The words of a query, lowercased, each once, in the order they first appear.
pub(crate) fn words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        let word = word.to_lowercase();
        if !words.contains(&word) {
            words.push(word);
        }
    }
    words
}

/// The MATCH expression for these words (which `words` made: letters and digits only).
pub(crate) fn expression(words: &[String], terms: Terms) -> String {
    let joiner = match terms {
        Terms::Any => " OR ",
        Terms::All => " AND ",
    };
    let quoted: Vec<String> = words
        .iter()
        .map(|word| {
            // `words` leaves no quote in a word; doubling any anyway keeps this function
            // safe on its own.
            format!("\"{}\"", word.replace('"', "\"\""))
        })
        .collect();
    quoted.join(joiner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fts_syntax_becomes_plain_words() {
        let table: [(&str, &[&str]); 8] = [
            ("cargo build", &["cargo", "build"]),
            ("\"unbalanced", &["unbalanced"]),
            ("a AND b OR NOT c", &["a", "and", "b", "or", "not", "c"]),
            ("NEAR(one two", &["near", "one", "two"]),
            ("pre* ^start col:value", &["pre", "start", "col", "value"]),
            ("((()))", &[]),
            ("Déjà VU déjà", &["déjà", "vu"]),
            ("snake_case-and.dots", &["snake", "case", "and", "dots"]),
        ];
        for (query, expected) in table {
            assert_eq!(words(query), expected, "query {query:?}");
        }
    }

    #[test]
    fn expression_quotes_every_word() {
        let words = vec!["near".to_string(), "and".to_string()];
        assert_eq!(expression(&words, Terms::Any), "\"near\" OR \"and\"");
        assert_eq!(expression(&words, Terms::All), "\"near\" AND \"and\"");
        let odd = vec!["a\"b".to_string()];
        assert_eq!(expression(&odd, Terms::Any), "\"a\"\"b\"");
    }
}
