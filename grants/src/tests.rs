use std::collections::BTreeSet;
use std::path::PathBuf;

use super::*;

fn random(n: u8) -> [u8; RANDOM_BYTES] {
    let mut r = [0u8; RANDOM_BYTES];
    for (i, b) in r.iter_mut().enumerate() {
        *b = n.wrapping_mul(31).wrapping_add(i as u8);
    }
    r
}

fn store() -> (tempfile::TempDir, GrantStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = GrantStore::open(&dir.path().join("grants.sqlite")).unwrap();
    (dir, store)
}

fn scope(primitives: &[&str], write: &[&str]) -> GrantScope {
    GrantScope {
        primitives: Some(
            primitives
                .iter()
                .map(|s| s.to_string())
                .collect::<BTreeSet<_>>(),
        ),
        write: (!write.is_empty()).then(|| write.iter().map(PathBuf::from).collect()),
        ..GrantScope::default()
    }
}

#[test]
fn a_token_authenticates_only_as_issued() {
    let (_dir, store) = store();
    let minted = store
        .mint(None, "s1", NewGrant::default(), 1_000, &random(1))
        .unwrap();
    assert_eq!(
        store.authenticate(&minted.token).unwrap().id,
        minted.grant.id
    );
    // The id alone, a changed secret, another prefix, garbage: all refused alike.
    let (head, secret) = minted.token.rsplit_once('_').unwrap();
    let mut flipped = secret.as_bytes().to_vec();
    flipped[0] = if flipped[0] == b'0' { b'1' } else { b'0' };
    let forged = format!("{head}_{}", String::from_utf8(flipped).unwrap());
    for bad in [
        head.to_owned(),
        forged,
        minted.token.replace("aidog_", "aidox_"),
        "aidog_zz_zz".into(),
        String::new(),
    ] {
        assert_eq!(
            store.authenticate(&bad).unwrap_err().code(),
            "grant_token_invalid",
            "{bad}"
        );
    }
}

#[test]
fn uses_count_against_the_grant_and_every_parent() {
    let (_dir, store) = store();
    let parent = store
        .mint(
            None,
            "s1",
            NewGrant {
                uses_max: Some(3),
                ..NewGrant::default()
            },
            1_000,
            &random(1),
        )
        .unwrap()
        .grant;
    // A child asking for more uses than the parent has left is refused; one inheriting gets
    // what is left.
    let wider = NewGrant {
        uses_max: Some(4),
        ..NewGrant::default()
    };
    let err = store
        .mint(Some(&parent.id), "s2", wider, 1_001, &random(2))
        .unwrap_err();
    assert_eq!(err.code(), "grant_not_narrower");
    let child = store
        .mint(
            Some(&parent.id),
            "s2",
            NewGrant::default(),
            1_001,
            &random(3),
        )
        .unwrap()
        .grant;
    assert_eq!(child.uses_max, Some(3));
    store.use_grant(&child.id, 1_002).unwrap();
    store.use_grant(&parent.id, 1_003).unwrap();
    store.use_grant(&child.id, 1_004).unwrap();
    // The parent is spent (3 uses through it), so the child is too, though it used only 2.
    let err = store.use_grant(&child.id, 1_005).unwrap_err();
    assert_eq!(err.code(), "grant_exhausted");
    assert_eq!(err.deny_code(), Some(DenyCode::GrantExhausted));
    assert_eq!(store.get(&parent.id).unwrap().uses, 3);
    assert_eq!(store.get(&child.id).unwrap().uses, 2);
}

#[test]
fn expiry_rate_and_revocation_refuse_with_their_codes() {
    let (_dir, store) = store();
    let g = store
        .mint(
            None,
            "s1",
            NewGrant {
                expires_ms: Some(10_000),
                rate: Some(Rate { count: 2, per_s: 1 }),
                ..NewGrant::default()
            },
            1_000,
            &random(1),
        )
        .unwrap()
        .grant;
    store.use_grant(&g.id, 2_000).unwrap();
    store.use_grant(&g.id, 2_100).unwrap();
    let limited = store.use_grant(&g.id, 2_200).unwrap_err();
    assert_eq!(limited.code(), "grant_rate_limited");
    assert!(limited.to_string().contains("800 ms"), "{limited}");
    store.use_grant(&g.id, 3_000).unwrap();
    assert_eq!(
        store.use_grant(&g.id, 10_000).unwrap_err().code(),
        "grant_expired"
    );

    let parent = store
        .mint(None, "s1", NewGrant::default(), 1_000, &random(2))
        .unwrap()
        .grant;
    let child = store
        .mint(
            Some(&parent.id),
            "s2",
            NewGrant::default(),
            1_000,
            &random(3),
        )
        .unwrap()
        .grant;
    let grandchild = store
        .mint(
            Some(&child.id),
            "s3",
            NewGrant::default(),
            1_000,
            &random(4),
        )
        .unwrap()
        .grant;
    let revoked = store.revoke(&child.id, 5_000).unwrap();
    assert_eq!(revoked, vec![child.id.clone(), grandchild.id.clone()]);
    assert_eq!(
        store.use_grant(&grandchild.id, 5_001).unwrap_err().code(),
        "grant_revoked"
    );
    store.use_grant(&parent.id, 5_001).unwrap();
    // A revoked grant mints nothing.
    let err = store
        .mint(
            Some(&child.id),
            "s2",
            NewGrant::default(),
            5_002,
            &random(5),
        )
        .unwrap_err();
    assert_eq!(err.code(), "grant_revoked");
}

#[test]
fn a_child_is_narrower_in_scope_expiry_and_rate() {
    let (_dir, store) = store();
    let parent = store
        .mint(
            None,
            "s1",
            NewGrant {
                scope: scope(&["read_only", "write_file"], &["/w/src"]),
                expires_ms: Some(60_000),
                rate: Some(Rate {
                    count: 10,
                    per_s: 60,
                }),
                ..NewGrant::default()
            },
            1_000,
            &random(1),
        )
        .unwrap()
        .grant;
    let mint = |new: NewGrant, n: u8| store.mint(Some(&parent.id), "s2", new, 2_000, &random(n));
    let ok = mint(
        NewGrant {
            scope: scope(&["read_file"], &["/w/src/a"]),
            ..NewGrant::default()
        },
        2,
    )
    .unwrap()
    .grant;
    assert_eq!(ok.expires_ms, Some(60_000));
    assert_eq!(
        ok.rate,
        Some(Rate {
            count: 10,
            per_s: 60
        })
    );
    let wider = [
        NewGrant {
            scope: scope(&["edit_file"], &[]),
            ..NewGrant::default()
        },
        NewGrant {
            scope: scope(&["read_file"], &["/w"]),
            ..NewGrant::default()
        },
        NewGrant {
            expires_ms: Some(120_000),
            ..NewGrant::default()
        },
        NewGrant {
            rate: Some(Rate {
                count: 10,
                per_s: 30,
            }),
            ..NewGrant::default()
        },
    ];
    for (i, new) in wider.into_iter().enumerate() {
        let err = mint(new.clone(), 10 + i as u8).unwrap_err();
        assert_eq!(err.code(), "grant_not_narrower", "{new:?}");
    }
    let bad = NewGrant {
        scope: scope(&["no_such_primitive"], &[]),
        ..NewGrant::default()
    };
    assert_eq!(mint(bad, 20).unwrap_err().code(), "grant_invalid");
}

#[test]
fn two_stores_on_one_file_never_spend_a_use_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grants.sqlite");
    let first = GrantStore::open(&path).unwrap();
    let g = first
        .mint(
            None,
            "s1",
            NewGrant {
                uses_max: Some(50),
                ..NewGrant::default()
            },
            1_000,
            &random(1),
        )
        .unwrap()
        .grant;
    let spent: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let path = path.clone();
                let id = g.id.clone();
                s.spawn(move || {
                    let store = GrantStore::open(&path).unwrap();
                    (0..30)
                        .filter(|i| store.use_grant(&id, 2_000 + i).is_ok())
                        .count()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(spent, 50, "exactly the grant's uses, across connections");
    assert_eq!(first.get(&g.id).unwrap().uses, 50);
}

#[test]
fn a_sessions_list_holds_what_it_minted_and_what_was_narrowed_from_that() {
    let (_dir, store) = store();
    let a = store
        .mint(None, "s1", NewGrant::default(), 1, &random(1))
        .unwrap()
        .grant;
    let b = store
        .mint(Some(&a.id), "s2", NewGrant::default(), 2, &random(2))
        .unwrap()
        .grant;
    let other = store
        .mint(None, "s9", NewGrant::default(), 3, &random(3))
        .unwrap()
        .grant;
    let ids = |gs: Vec<Grant>| gs.into_iter().map(|g| g.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list(Some("s1")).unwrap()),
        vec![a.id.clone(), b.id.clone()]
    );
    assert_eq!(ids(store.list(None).unwrap()).len(), 3);
    assert!(store.descends_from(&b.id, &a.id).unwrap());
    assert!(!store.descends_from(&other.id, &a.id).unwrap());
}
