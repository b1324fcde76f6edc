use super::*;

fn term(leading: bool, until: Instant) -> Leadership {
    let (tx, rx) = watch::channel(Term { leading, until });
    std::mem::forget(tx);
    Leadership { rx }
}

#[test]
fn settings_follow_client_go_rules() {
    let mut s = LeaseSettings::new("ns".into(), "me".into());
    assert!(s.validate().is_ok());
    s.renew_deadline = s.duration;
    assert!(s.validate().is_err());
    s.renew_deadline = Duration::from_secs(2);
    s.retry = Duration::from_secs(2);
    assert!(s.validate().is_err());
}

#[tokio::test(start_paused = true)]
async fn the_token_expires_by_itself_at_the_renew_deadline() {
    let leadership = term(true, Instant::now() + Duration::from_secs(10));
    assert!(leadership.is_leader());
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(leadership.is_leader());
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(!leadership.is_leader(), "no renewal: no writes");
}

#[tokio::test(start_paused = true)]
async fn lost_fires_at_the_deadline_without_any_message() {
    let leadership = term(true, Instant::now() + Duration::from_secs(10));
    let started = Instant::now();
    leadership.lost().await;
    assert_eq!(started.elapsed(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn a_renewal_moves_the_deadline() {
    let (tx, rx) = watch::channel(Term {
        leading: true,
        until: Instant::now() + Duration::from_secs(10),
    });
    let leadership = Leadership { rx };
    let started = Instant::now();
    let renew = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        tx.send_replace(Term {
            leading: true,
            until: Instant::now() + Duration::from_secs(10),
        });
        std::future::pending::<()>().await;
    };
    tokio::select! {
        _ = leadership.lost() => {}
        _ = renew => {}
    }
    assert_eq!(started.elapsed(), Duration::from_secs(15));
}

#[test]
fn plugin_leases_name_their_plugin_and_membership_leases_none() {
    assert_eq!(
        plugin_of_lease(&lease_name("pod-annotator")),
        Some("pod-annotator")
    );
    assert_eq!(plugin_of_lease(&member_name("host-1")), None);
    assert_eq!(plugin_of_lease("other"), None);
}

#[test]
fn member_names_are_valid_lease_names() {
    assert_eq!(member_name("Host_1:42"), "kubeplug-replica.host-1-42");
    assert!(member_name(&"x".repeat(400)).len() <= 253);
}
