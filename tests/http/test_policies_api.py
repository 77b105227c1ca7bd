"""Policy endpoints end to end on the real store."""

from __future__ import annotations

from tests.factories import example_policy, policy_body


def create(api, body=None) -> dict:
    result = api.post("/dispatch/policies", json=body or policy_body())
    assert result.status_code == 201, result.json
    return result.json


def test_create_draft_answers_201_with_the_full_policy_and_location(api):
    result = api.post("/dispatch/policies", json=policy_body())

    assert result.status_code == 201
    policy = result.json
    assert result.headers["Location"] == f"/api/v1/ticketmanager/dispatch/policies/{policy['id']}"
    assert policy["status"] == "draft"
    assert policy["version"] == 1
    assert policy["family_id"].startswith("pf_") and len(policy["family_id"]) <= 20
    assert policy["rules"][0]["id"] > 0
    assert policy["rules"][0]["when"] == policy_body()["rules"][0]["when"]
    assert policy["created_at"].endswith("Z")
    assert policy["activated_at"] is None


def test_read_returns_what_was_created(api):
    created = create(api)
    warnings = created.pop("warnings")  # of the answer to the write, not of the policy

    result = api.get(f"/dispatch/policies/{created['id']}")

    assert result.status_code == 200
    assert result.json == created
    assert len(warnings) == 2  # the two users are no engineers in this store


def test_list_filters_by_status_and_family_and_pages(api):
    first = create(api)
    second = create(api)
    api.post(f"/dispatch/policies/{second['id']}/activate")

    everything = api.get("/dispatch/policies").json
    drafts = api.get("/dispatch/policies", params={"status": "draft"}).json
    family = api.get("/dispatch/policies", params={"family_id": first["family_id"]}).json
    paged = api.get("/dispatch/policies", params={"limit": 1, "offset": 1}).json

    assert everything["total"] == 2
    assert [p["id"] for p in drafts["items"]] == [first["id"]]
    assert [p["id"] for p in family["items"]] == [first["id"]]
    assert paged["total"] == 2 and [p["id"] for p in paged["items"]] == [second["id"]]


def test_edit_draft_replaces_its_body(api):
    created = create(api)

    result = api.put(f"/dispatch/policies/{created['id']}", json=policy_body(name="Renamed"))

    assert result.status_code == 200
    assert result.json["name"] == "Renamed"
    assert api.get(f"/dispatch/policies/{created['id']}").json["name"] == "Renamed"


def test_active_policy_cannot_be_edited_or_deleted(api):
    created = create(api)
    api.post(f"/dispatch/policies/{created['id']}/activate")

    edit = api.put(f"/dispatch/policies/{created['id']}", json=policy_body(name="x"))
    delete = api.delete(f"/dispatch/policies/{created['id']}")

    assert edit.status_code == 409 and edit.json["code"] == "conflict"
    assert delete.status_code == 409
    assert api.get(f"/dispatch/policies/{created['id']}").json["name"] == created["name"]


def test_delete_draft(api):
    created = create(api)

    result = api.delete(f"/dispatch/policies/{created['id']}")

    assert result.status_code == 204
    assert api.get(f"/dispatch/policies/{created['id']}").status_code == 404


def test_activate_then_replacement_supersedes_the_old_version(api, clock):
    original = create(api)
    activated = api.post(f"/dispatch/policies/{original['id']}/activate")
    assert activated.status_code == 200
    assert activated.json["status"] == "active" and activated.json["activated_at"]

    clock.advance(60)
    replacement = api.post(f"/dispatch/policies/{original['id']}/replacements",
                           json=policy_body(name="v2"))
    assert replacement.status_code == 201
    assert replacement.json["family_id"] == original["family_id"]
    assert replacement.json["version"] == 2 and replacement.json["status"] == "draft"

    moved = api.post(f"/dispatch/policies/{replacement.json['id']}/activate")

    assert moved.json["status"] == "active"
    assert api.get(f"/dispatch/policies/{original['id']}").json["status"] == "superseded"


def test_rollback_activates_a_superseded_version(api):
    original = create(api)
    api.post(f"/dispatch/policies/{original['id']}/activate")
    replacement = api.post(f"/dispatch/policies/{original['id']}/replacements",
                           json=policy_body()).json
    api.post(f"/dispatch/policies/{replacement['id']}/activate")

    rollback = api.post(f"/dispatch/policies/{original['id']}/activate")

    assert rollback.status_code == 200 and rollback.json["status"] == "active"
    assert api.get(f"/dispatch/policies/{replacement['id']}").json["status"] == "superseded"


def test_activating_an_invalid_draft_answers_422_with_every_error(api):
    body = policy_body()
    body["rules"][0]["when"] = {"all": [
        {"field": "issue.summary", "operator": "regex", "value": "(unclosed"},
        {"field": "now", "operator": "time_window", "time_window": {
            "timezone": "Mars/Olympus", "weekdays": ["mon"], "start": "09:00", "end": "18:00"}},
    ]}
    created = create(api, body)

    result = api.post(f"/dispatch/policies/{created['id']}/activate")

    assert result.status_code == 422
    assert result.json["code"] == "policy_invalid"
    paths = {problem["path"] for problem in result.json["errors"]}
    assert any("all[0]" in path for path in paths)
    assert any("all[1]" in path for path in paths)
    assert api.get(f"/dispatch/policies/{created['id']}").json["status"] == "draft"


def test_deactivate_moves_active_to_inactive_and_refuses_a_draft(api):
    created = create(api)

    refused = api.post(f"/dispatch/policies/{created['id']}/deactivate")
    api.post(f"/dispatch/policies/{created['id']}/activate")
    moved = api.post(f"/dispatch/policies/{created['id']}/deactivate")

    assert refused.status_code == 409
    assert moved.status_code == 200 and moved.json["status"] == "inactive"


def test_activating_an_active_policy_is_a_conflict(api):
    created = create(api)
    api.post(f"/dispatch/policies/{created['id']}/activate")

    result = api.post(f"/dispatch/policies/{created['id']}/activate")

    assert result.status_code == 409


def staff(api, *emails: str, enabled: bool = True) -> None:
    for email in emails:
        assert api.put(f"/engineers/{email}",
                       json={"dispatch_enabled": enabled}).status_code in (200, 201)


def test_validate_reports_without_saving(api):
    staff(api, "a@example.com", "b@example.com")
    good = api.post("/dispatch/policies/validate", json=policy_body())
    bad = api.post("/dispatch/policies/validate", json=policy_body(rules=[]))

    assert good.status_code == 200
    assert good.json == {"valid": True, "errors": [], "warnings": []}
    assert bad.status_code == 200 and bad.json["valid"] is False
    assert bad.json["errors"][0]["path"].startswith("rules")
    assert api.get("/dispatch/policies").json["total"] == 0


def test_seed_notification_policies_are_activated_now_escalation_has_an_executor(api):
    for name in ("priority-assignee", "priority-l2", "severity-assignee"):
        created = create(api, example_policy(name))
        result = api.post(f"/dispatch/policies/{created['id']}/activate")

        assert result.status_code == 200, (name, result.json)
        assert api.get(f"/dispatch/policies/{created['id']}").json["status"] == "active"


def test_unknown_policy_is_404(api):
    for result in (api.get("/dispatch/policies/999"),
                   api.post("/dispatch/policies/999/activate"),
                   api.post("/dispatch/policies/999/replacements", json=policy_body())):
        assert result.status_code == 404
        assert result.json["code"] == "not_found"


def test_server_assigned_fields_in_a_body_are_refused(api):
    result = api.post("/dispatch/policies", json=policy_body(id=5, status="active"))

    assert result.status_code == 400
    assert {"id", "status"} <= {problem["path"] for problem in result.json["errors"]}


def test_a_receiver_naming_no_dispatch_enabled_engineer_is_a_warning_on_every_write(api):
    """A misspelt or disabled engineer in a ``users`` receiver will never be assigned: each
    write and the validation warn about it at its path, and none refuses the policy."""
    staff(api, "alice@example.com", "bob@example.com")
    staff(api, "carol@example.com", enabled=False)
    body = policy_body()
    body["rules"][0]["then"][0]["assign"]["receiver"]["users"] = [
        "alice@example.com", "alcie@example.com", "carol@example.com"]
    body["rules"][0]["then"][0]["assign"]["fallback"] = {"type": "user",
                                                          "user": "Bob@Example.com"}
    where = "rules[0].then[0].assign.receiver.users"
    expected = [
        {"path": f"{where}[1]", "message": '"alcie@example.com" is not a dispatch-enabled '
         "engineer: no engineer has this email (a typo, or one to create); an assignment "
         "passes over them"},
        {"path": f"{where}[2]", "message": '"carol@example.com" is not a dispatch-enabled '
         "engineer: dispatch is disabled for this engineer; an assignment passes over them"}]

    validated = api.post("/dispatch/policies/validate", json=body)
    created = api.post("/dispatch/policies", json=body)
    replaced = api.post(f"/dispatch/policies/{created.json['id']}/replacements", json=body)
    edited = api.put(f"/dispatch/policies/{replaced.json['id']}", json=body)

    assert validated.status_code == 200
    assert validated.json == {"valid": True, "errors": [], "warnings": expected}
    assert (created.status_code, created.json["warnings"]) == (201, expected)
    assert (replaced.status_code, replaced.json["warnings"]) == (201, expected)
    assert (edited.status_code, edited.json["warnings"]) == (200, expected)
    assert api.post(f"/dispatch/policies/{created.json['id']}/activate").status_code == 200


def test_an_email_that_is_already_an_error_is_not_warned_about_again(api):
    body = policy_body()
    body["rules"][0]["then"][0]["assign"]["receiver"]["users"] = ["alice", "a@example.com"]

    validated = api.post("/dispatch/policies/validate", json=body).json

    assert [e["path"] for e in validated["errors"]] == [
        "rules[0].then[0].assign.receiver.users[0]"]
    assert [w["path"] for w in validated["warnings"]] == [
        "rules[0].then[0].assign.receiver.users[1]"]
