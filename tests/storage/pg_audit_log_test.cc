// PgAuditLog against a real PostgreSQL: the table refuses changes through SQL, and Verify finds
// each kind of tampering done behind the server's back by someone who gets around that refusal
// (a superuser disabling the trigger), with the row it happened at.

#include "storage/pg_audit_log.h"

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/audit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "tests/support/postgres_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {

// Found by argument-dependent lookup, so they live with AuditBreak.
bool operator==(const AuditBreak& a, const AuditBreak& b) {
  return a.id == b.id && a.kind == b.kind;
}
void PrintTo(const AuditBreak& b, std::ostream* os) {
  *os << "{" << b.id << ", " << AuditBreakKindName(b.kind) << "}";
}

namespace storage {
namespace {

using ::gpufed::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Kind = AuditBreak::Kind;

constexpr char kKey[] = "pg-audit-test-key-0123456789abcdef0123";

AuditBreak Break(int64_t id, Kind kind) { return AuditBreak{id, kind}; }

class PgAuditLogTest : public testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    PgAuditLogOptions options;
    options.key = kKey;
    options.verify_page = 3;  // the walk crosses pages
    ASSERT_OK_AND_ASSIGN(log_, PgAuditLog::Create(dsn(), options));
    for (int i = 1; i <= 6; ++i) {
      AuditEvent e;
      e.actor = "user:alice";
      e.tenant = "acme";
      e.action = "workloads.submit";
      e.object = absl::StrCat("workload/", i);
      e.outcome = "ok";
      e.detail = "cluster: dgx-1";
      ASSERT_OK(log_->Append(e));
    }
    ASSERT_OK_AND_ASSIGN(AuditVerification clean, log_->Verify());
    ASSERT_THAT(clean.breaks, IsEmpty());
  }
  void TearDown() override {
    log_.reset();
    PostgresTest::TearDown();
  }

  // Runs `sql` as the database's owner would, with the append-only trigger out of the way.
  void Tamper(const std::string& sql) {
    pqxx::connection conn(dsn());
    pqxx::work txn(conn);
    txn.exec0("ALTER TABLE audit_events DISABLE TRIGGER USER");
    txn.exec0(sql);
    txn.exec0("ALTER TABLE audit_events ENABLE TRIGGER USER");
    txn.commit();
  }

  std::vector<AuditBreak> Breaks() {
    absl::StatusOr<AuditVerification> v = log_->Verify();
    EXPECT_OK(v);
    return v.ok() ? v->breaks : std::vector<AuditBreak>{};
  }

  std::unique_ptr<PgAuditLog> log_;
};

TEST_F(PgAuditLogTest, TheTableRefusesUpdateDeleteAndTruncate) {
  pqxx::connection conn(dsn());
  for (const char* sql : {"UPDATE audit_events SET detail = 'x' WHERE id = 2",
                          "DELETE FROM audit_events WHERE id = 2", "TRUNCATE audit_events"}) {
    pqxx::work txn(conn);
    EXPECT_THROW(txn.exec0(sql), pqxx::sql_error) << sql;
  }
  EXPECT_THAT(Breaks(), IsEmpty());
}

TEST_F(PgAuditLogTest, AnEditedRowIsReportedAsEdited) {
  Tamper("UPDATE audit_events SET detail = 'cluster: elsewhere' WHERE id = 3");
  EXPECT_THAT(Breaks(), ElementsAre(Break(3, Kind::kEdited)));
}

TEST_F(PgAuditLogTest, AnEditedRowWithARecomputedUnkeyedHashIsStillEdited) {
  // Someone without the key re-hashes the row (plain SHA-256) and fixes the next link too.
  Tamper(
      "UPDATE audit_events SET outcome = 'denied', hash = encode(sha256('forged'), 'hex') "
      "WHERE id = 4; UPDATE audit_events SET prev_hash = encode(sha256('forged'), 'hex') "
      "WHERE id = 5");
  EXPECT_THAT(Breaks(), ElementsAre(Break(4, Kind::kEdited), Break(5, Kind::kEdited)));
}

TEST_F(PgAuditLogTest, ADeletedMiddleRowIsReportedAsDeleted) {
  Tamper("DELETE FROM audit_events WHERE id = 4");
  EXPECT_THAT(Breaks(), ElementsAre(Break(4, Kind::kDeleted)));
}

TEST_F(PgAuditLogTest, AnInsertedForgedRowIsReportedAsInserted) {
  // Chained onto the real head, as a forger would, but hashed without the key.
  Tamper(
      "INSERT INTO audit_events (id, at, actor, tenant, project, action, object, outcome, "
      "reason, detail, prev_hash, hash) SELECT 7, now(), 'user:alice', 'acme', '', "
      "'tokens.revoke', 'token/1', 'ok', '', '', hash, encode(sha256('x'), 'hex') "
      "FROM audit_events WHERE id = 6");
  EXPECT_THAT(Breaks(), ElementsAre(Break(7, Kind::kInserted)));
}

TEST_F(PgAuditLogTest, RowsCutFromTheEndShowAgainstTheRecordedHead) {
  Tamper("DELETE FROM audit_events WHERE id >= 5");
  EXPECT_THAT(Breaks(), ElementsAre(Break(5, Kind::kDeleted)));
}

TEST_F(PgAuditLogTest, AppendsGoOnAfterTamperingAndOnlyTheTamperedRowIsReported) {
  Tamper("UPDATE audit_events SET actor = 'user:bob' WHERE id = 2");
  AuditEvent e;
  e.actor = "scheduler";
  e.action = "workloads.place";
  e.object = "workload/1";
  e.outcome = "ok";
  ASSERT_OK(log_->Append(e));
  ASSERT_OK_AND_ASSIGN(AuditVerification v, log_->Verify());
  EXPECT_THAT(v.breaks, ElementsAre(Break(2, Kind::kEdited)));
  EXPECT_EQ(v.rows, 7);
  EXPECT_EQ(v.head_id, 7);
}

TEST_F(PgAuditLogTest, WithoutAKeyAppendAndVerifyAreRefused) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PgAuditLog> keyless,
                       PgAuditLog::Create(dsn(), PgAuditLogOptions()));
  EXPECT_THAT(keyless->Append(AuditEvent()), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(keyless->Seal(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(keyless->Verify(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(PgAuditLogTest, AServerWithAnotherKeyRecordsButNeverSeals) {
  PgAuditLogOptions options;
  options.key = "not-the-key-not-the-key-not-the-key-0000";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PgAuditLog> other, PgAuditLog::Create(dsn(), options));
  AuditEvent e;
  e.actor = "user:bob";
  e.action = "tenants.create";
  e.object = "tenant/globex";
  e.outcome = "ok";
  ASSERT_OK(other->Append(e));
  EXPECT_THAT(other->Seal(), StatusIs(absl::StatusCode::kFailedPrecondition));
  // The row waits for a server with the chain's key, which chains it whole.
  ASSERT_OK_AND_ASSIGN(AuditVerification v, log_->Verify());
  EXPECT_THAT(v.breaks, IsEmpty());
  EXPECT_EQ(v.rows, 7);
}

// A state change and its audit row commit together, or neither does.
TEST_F(PgAuditLogTest, AWorkloadEventRolledBackLeavesNoAuditRow) {
  pqxx::connection conn(dsn());
  {
    pqxx::work txn(conn);
    txn.exec0("INSERT INTO tenants (name) VALUES ('acme')");
    txn.exec0("INSERT INTO projects (tenant, name) VALUES ('acme', 'research')");
    txn.exec0(
        "INSERT INTO workloads (id, tenant, project, name, spec) "
        "VALUES (41, 'acme', 'research', 'w', '{}')");
    txn.exec0(
        "INSERT INTO workload_events (workload_id, from_state, to_state, actor, reason) "
        "VALUES (41, NULL, 'PENDING', 'user:alice', 'submitted')");
    // Not committed.
  }
  ASSERT_OK_AND_ASSIGN(AuditVerification v, log_->Verify());
  EXPECT_EQ(v.rows, 6);
  {
    pqxx::work txn(conn);
    txn.exec0("INSERT INTO tenants (name) VALUES ('acme')");
    txn.exec0("INSERT INTO projects (tenant, name) VALUES ('acme', 'research')");
    txn.exec0(
        "INSERT INTO workloads (id, tenant, project, name, spec) "
        "VALUES (41, 'acme', 'research', 'w', '{}')");
    txn.exec0(
        "INSERT INTO workload_events (workload_id, from_state, to_state, actor, reason) "
        "VALUES (41, NULL, 'PENDING', 'user:alice', 'submitted')");
    txn.commit();
  }
  AuditFilter filter;
  filter.object = "workload/41";
  ASSERT_OK_AND_ASSIGN(AuditPage page, log_->List(filter));
  ASSERT_THAT(page.events, ::testing::SizeIs(1));
  EXPECT_EQ(page.events[0].actor, "user:alice");
  EXPECT_EQ(page.events[0].tenant, "acme");
  EXPECT_EQ(page.events[0].project, "research");
  EXPECT_EQ(page.events[0].action, "workloads.submit");
  EXPECT_EQ(page.events[0].id, 7);
}

TEST_F(PgAuditLogTest, AnotherKeyFindsEveryRowEdited) {
  PgAuditLogOptions options;
  options.key = "not-the-key-not-the-key-not-the-key-0000";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PgAuditLog> other, PgAuditLog::Create(dsn(), options));
  ASSERT_OK_AND_ASSIGN(AuditVerification v, other->Verify());
  EXPECT_EQ(v.breaks.size(), 6u);
}

}  // namespace
}  // namespace storage
}  // namespace gpufed
