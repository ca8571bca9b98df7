// quickfix-lp: a FIX 4.4 market-data acceptor on QuickFIX, run as a strict
// liquidity provider runs it (data-dictionary validation on), with fault
// switches for pricewire's integration tests and drills.
//
// Output (stdout, one line each, flushed):
//   READY <port>                  the acceptor listens
//   IN <message>                  every message received (554 masked)
//   REJECT-SENT <message>         every session Reject (35=3) or
//                                 BusinessMessageReject (35=j) we send
//   LOGOUT-SENT <message>         every Logout we send
//   EVENT <text>                  QuickFIX session events (validation
//                                 failures, garbled input, resends)
//   OK <command> / ERR <text>     answers to stdin commands
//
// Commands (stdin, one per line; the same names as the flags):
//   data on|off        market data at all: the W snapshot and X stream
//   heartbeats on|off  send our own Heartbeats
//   test-reply on|off  answer TestRequests
//   logon-reply on|off answer Logon (off: the connection stays silent)
//   silent on|off      send nothing at all (blackhole)
//   silent-after-logon on|off  answer Logon, then send nothing at all
//   garble <n>         send n Heartbeats with a wrong CheckSum
//   gap <n>            skip n outgoing sequence numbers once
//   resend <n>         forget the last n messages received, ask for them
//   logout             initiate a Logout
//   disconnect         drop the connection (as a restarted LP would)
//   flap <ms>          log every session out <ms> after its Logon (0: off)
//   reset-logon        in-session reset: Logon 141=Y at MsgSeqNum 1 while
//                      logged on (the daily reset of a 24-hour LP)
//   seqreset <n>       SequenceReset-Reset (no 123) to NewSeqNo n, then
//                      number our messages from n (n below: an LP that
//                      "restarted" its numbers the wrong way)
//   delete bid|ask     X with 279=2 for that side of every subscription,
//                      then stream the other side only
//   restore            the deleted side again (279=0), both sides streamed
//   mdreject           35=Y (281=0, 58) for every subscription, mid-stream;
//                      the subscriptions end
//   auth <user> <password> | auth off   require Username/Password
//   rate <per_s>       incrementals per second per subscription
//   status             counters
//   quit
//
// Flags: --port N --dict PATH [--sender LP] [--target PRICEWIRE]
//   [--rate N] [--symbol SYM=PRICE[:DIGITS]]... [--auth USER:PASSWORD]
//   [--no-data] [--no-heartbeats] [--no-test-reply] [--no-logon-reply]
//   [--silent] [--silent-after-logon] [--flap MS]

#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

// The garble switch writes bytes that QuickFIX would never produce (a wrong
// CheckSum) through the session's responder, which QuickFIX keeps private.
#define private public
#include <quickfix/Session.h>
#undef private
#include <quickfix/Application.h>
#include <quickfix/FileStore.h>
#include <quickfix/Log.h>
#include <quickfix/SessionSettings.h>
#include <quickfix/ThreadedSocketAcceptor.h>
#include <quickfix/fix44/Heartbeat.h>
#include <quickfix/fix44/MarketDataIncrementalRefresh.h>
#include <quickfix/fix44/MarketDataRequest.h>
#include <quickfix/fix44/MarketDataRequestReject.h>
#include <quickfix/fix44/MarketDataSnapshotFullRefresh.h>
#include <quickfix/fix44/Logon.h>
#include <quickfix/fix44/ResendRequest.h>
#include <quickfix/fix44/SequenceReset.h>

static std::mutex out_mutex;

static void say(const std::string& line) {
  std::lock_guard<std::mutex> l(out_mutex);
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// Message text with SOH shown as '|' and the Password (554) masked.
static std::string show(const FIX::Message& m) {
  std::string s = m.toString();
  for (auto& c : s) {
    if (c == '\x01') c = '|';
  }
  size_t p = s.find("|554=");
  if (p != std::string::npos) {
    size_t e = s.find('|', p + 5);
    s.replace(p + 5, e - (p + 5), "***");
  }
  return s;
}

class PrintLog : public FIX::Log {
 public:
  void clear() override {}
  void backup() override {}
  void onIncoming(const std::string&) override {}
  void onOutgoing(const std::string&) override {}
  void onEvent(const std::string& s) override { say("EVENT " + s); }
};

class PrintLogFactory : public FIX::LogFactory {
 public:
  FIX::Log* create() override { return new PrintLog; }
  FIX::Log* create(const FIX::SessionID&) override { return new PrintLog; }
  void destroy(FIX::Log* l) override { delete l; }
};

struct Quote {
  double mid;
  int digits;
};

struct Sub {
  std::string req_id;
  std::string symbol;
  Quote q;
};

// mid -/+ 10 points, moved by `step` points, rounded to the digits.
static double px(const Quote& q, int side, long step) {
  double scale = std::pow(10.0, q.digits);
  double points = std::round(q.mid * scale) + (side == 0 ? -10 : 10) + step;
  return points / scale;
}

struct Switches {
  std::atomic<bool> data{true}, heartbeats{true}, test_reply{true};
  std::atomic<bool> logon_reply{true}, silent{false}, silent_after_logon{false};
  std::atomic<int> garble{0};
  std::atomic<int> rate{50};
  std::atomic<long> flap_ms{0};
  std::atomic<int> deleted_side{-1};  // -1: none, 0: bid, 1: offer
  std::mutex auth_mutex;
  std::string user, password;  // empty user: no authentication
};

class Lp : public FIX::Application {
 public:
  explicit Lp(std::map<std::string, Quote> symbols) : symbols_(std::move(symbols)) {}
  Switches sw;
  std::atomic<long> in_count{0}, out_count{0}, suppressed{0}, quotes{0};

  void onCreate(const FIX::SessionID& id) override { sid_ = id; }
  void onLogon(const FIX::SessionID&) override {
    logon_at_ = now_ms();
    say("EVENT app: logged on");
  }

  static long now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
  }

  // The flap switch: a session older than flap_ms is logged out. Run by
  // the streaming thread.
  void flap_due() {
    long ms = sw.flap_ms, at = logon_at_;
    if (ms <= 0 || at == 0 || now_ms() - at < ms) return;
    FIX::Session* s = session();
    if (!s) return;
    FIX::Locker l(s->m_mutex);
    if (s->isLoggedOn() && !s->m_state.sentLogout()) {
      logon_at_ = 0;
      say("EVENT app: flap logout");
      s->generateLogout("quickfix-lp: flap");
    }
  }

  // Logon 141=Y at MsgSeqNum 1 while logged on: QuickFIX's sendRaw resets
  // both numbers when it sends a Logon with ResetSeqNumFlag.
  void reset_logon() {
    FIX::Session* s = session();
    if (!s || !s->isLoggedOn()) return;
    FIX44::Logon logon(FIX::EncryptMethod(0), FIX::HeartBtInt(s->m_state.heartBtInt()));
    logon.set(FIX::ResetSeqNumFlag(true));
    s->send(logon);
  }

  // SequenceReset-Reset to `n`, then our numbers go on from `n`.
  void seqreset(int n) {
    FIX::Session* s = session();
    if (!s || !s->isLoggedOn()) return;
    FIX44::SequenceReset sr{FIX::NewSeqNo(n)};
    s->send(sr);
    s->setNextSenderMsgSeqNum(n);
  }

  // One X deleting (action 2) or restoring (action 0) `side` of every
  // subscription.
  void side_update(int side, char action) {
    std::vector<Sub> subs;
    {
      std::lock_guard<std::mutex> l(subs_mutex_);
      subs = subs_;
    }
    for (auto& sub : subs) {
      FIX44::MarketDataIncrementalRefresh x;
      x.set(FIX::MDReqID(sub.req_id));
      FIX44::MarketDataIncrementalRefresh::NoMDEntries e;
      e.set(FIX::MDUpdateAction(action));
      e.set(FIX::MDEntryType(side == 0 ? '0' : '1'));
      e.set(FIX::Symbol(sub.symbol));
      if (action != '2') {
        e.set(FIX::MDEntryPx(px(sub.q, side, 0)));
        e.set(FIX::MDEntrySize(1000000));
      }
      x.addGroup(e);
      FIX::Session::sendToTarget(x, sid_);
    }
  }

  // 35=Y for every subscription; the subscriptions end.
  void mdreject() {
    std::vector<Sub> subs;
    {
      std::lock_guard<std::mutex> l(subs_mutex_);
      subs.swap(subs_);
    }
    for (auto& sub : subs) {
      FIX44::MarketDataRequestReject rej{FIX::MDReqID(sub.req_id)};
      rej.set(FIX::MDReqRejReason('0'));
      rej.set(FIX::Text("instrument suspended"));
      FIX::Session::sendToTarget(rej, sid_);
    }
  }
  void onLogout(const FIX::SessionID&) override {
    std::lock_guard<std::mutex> l(subs_mutex_);
    subs_.clear();
    muted_ = false;
  }

  void toAdmin(FIX::Message& m, const FIX::SessionID&) override {
    const std::string t = m.getHeader().getField(FIX::FIELD::MsgType);
    bool answer = m.isSetField(FIX::FIELD::TestReqID);
    bool drop = sw.silent || muted_;
    if (t == "A") {
      if (!sw.logon_reply) {
        muted_ = true;  // the whole connection stays silent
        drop = true;
      } else if (sw.silent_after_logon) {
        muted_ = true;  // this Logon goes, nothing after it
        drop = sw.silent;
      }
    } else if (t == "0" && !answer && !sw.heartbeats) {
      drop = true;
    } else if (t == "0" && answer && !sw.test_reply) {
      drop = true;
    }
    if (drop && t != "5") {
      suppressed++;
      // Caught by Session::sendRaw: the message is neither sent nor
      // stored, and the sequence number is not used.
      throw FIX::IOException("quickfix-lp: suppressed " + t);
    }
    out_count++;
    if (t == "3") say("REJECT-SENT " + show(m));
    if (t == "5") say("LOGOUT-SENT " + show(m));
  }

  void toApp(FIX::Message& m, const FIX::SessionID&) throw(FIX::DoNotSend) override {
    if (sw.silent || muted_) {
      suppressed++;
      throw FIX::DoNotSend();
    }
    out_count++;
    const std::string t = m.getHeader().getField(FIX::FIELD::MsgType);
    if (t == "j") say("REJECT-SENT " + show(m));
    if (t == "Y") say("MDREJECT-SENT " + show(m));
  }

  void fromAdmin(const FIX::Message& m, const FIX::SessionID&) throw(
      FIX::FieldNotFound, FIX::IncorrectDataFormat, FIX::IncorrectTagValue,
      FIX::RejectLogon) override {
    in_count++;
    say("IN " + show(m));
    if (m.getHeader().getField(FIX::FIELD::MsgType) != "A") return;
    muted_ = false;  // a new connection; toAdmin decides again
    std::lock_guard<std::mutex> l(sw.auth_mutex);
    if (sw.user.empty()) return;
    std::string user = m.isSetField(553) ? m.getField(553) : "";
    std::string pass = m.isSetField(554) ? m.getField(554) : "";
    if (user != sw.user || pass != sw.password) {
      say("EVENT app: logon refused: bad credentials");
      throw FIX::RejectLogon("bad credentials");
    }
    say("EVENT app: credentials accepted");
  }

  void fromApp(const FIX::Message& m, const FIX::SessionID& id) throw(
      FIX::FieldNotFound, FIX::IncorrectDataFormat, FIX::IncorrectTagValue,
      FIX::UnsupportedMessageType) override {
    in_count++;
    say("IN " + show(m));
    if (m.getHeader().getField(FIX::FIELD::MsgType) != "V") {
      throw FIX::UnsupportedMessageType();
    }
    on_request(m, id);
  }

  void on_request(const FIX::Message& m, const FIX::SessionID& id) {
    std::string req = m.getField(262);
    char kind = m.getField(263).at(0);
    FIX44::MarketDataRequest::NoRelatedSym g;
    m.getGroup(1, g);
    std::string sym = g.getField(55);
    if (kind == '2') {
      std::lock_guard<std::mutex> l(subs_mutex_);
      for (auto it = subs_.begin(); it != subs_.end(); ++it) {
        if (it->req_id == req) {
          subs_.erase(it);
          break;
        }
      }
      return;
    }
    auto found = symbols_.find(sym);
    if (found == symbols_.end()) {
      FIX44::MarketDataRequestReject rej{FIX::MDReqID(req)};
      rej.set(FIX::MDReqRejReason('0'));
      rej.set(FIX::Text("unknown symbol " + sym));
      FIX::Session::sendToTarget(rej, id);
      return;
    }
    if (sw.data) send_snapshot(req, sym, found->second, id);
    if (kind == '1') {
      std::lock_guard<std::mutex> l(subs_mutex_);
      subs_.push_back(Sub{req, sym, found->second});
    }
  }

  void send_snapshot(const std::string& req, const std::string& sym, const Quote& q,
                     const FIX::SessionID& id) {
    FIX44::MarketDataSnapshotFullRefresh w;
    w.set(FIX::MDReqID(req));
    w.set(FIX::Symbol(sym));
    for (int side = 0; side < 2; side++) {
      FIX44::MarketDataSnapshotFullRefresh::NoMDEntries e;
      e.set(FIX::MDEntryType(side == 0 ? '0' : '1'));
      e.set(FIX::MDEntryPx(px(q, side, 0)));
      e.set(FIX::MDEntrySize(1000000));
      w.addGroup(e);
    }
    FIX::Session::sendToTarget(w, id);
  }

  // One X per subscription per tick of the streaming thread.
  void stream_once(long n) {
    if (!sw.data) return;
    std::vector<Sub> subs;
    {
      std::lock_guard<std::mutex> l(subs_mutex_);
      subs = subs_;
    }
    int deleted = sw.deleted_side;
    for (auto& s : subs) {
      FIX44::MarketDataIncrementalRefresh x;
      x.set(FIX::MDReqID(s.req_id));
      for (int side = 0; side < 2; side++) {
        if (side == deleted) continue;
        FIX44::MarketDataIncrementalRefresh::NoMDEntries e;
        e.set(FIX::MDUpdateAction('1'));
        e.set(FIX::MDEntryType(side == 0 ? '0' : '1'));
        e.set(FIX::Symbol(s.symbol));
        e.set(FIX::MDEntryPx(px(s.q, side, n % 7)));
        e.set(FIX::MDEntrySize(1000000));
        x.addGroup(e);
      }
      try {
        if (FIX::Session::sendToTarget(x, sid_)) quotes++;
      } catch (std::exception&) {
      }
    }
  }

  FIX::Session* session() { return FIX::Session::lookupSession(sid_); }

  // A Heartbeat with our next sequence number and a wrong CheckSum,
  // written past QuickFIX (which would never send it); the number is not
  // used, so the next real message carries it.
  void garble_one() {
    FIX::Session* s = session();
    if (!s || !s->isLoggedOn()) return;
    FIX::Locker l(s->m_mutex);
    FIX44::Heartbeat hb;
    FIX::Header& h = hb.getHeader();
    h.setField(FIX::SenderCompID(sid_.getSenderCompID()));
    h.setField(FIX::TargetCompID(sid_.getTargetCompID()));
    h.setField(FIX::MsgSeqNum(s->getExpectedSenderNum()));
    h.setField(FIX::SendingTime(FIX::UtcTimeStamp()));
    std::string raw = hb.toString();
    size_t p = raw.rfind("10=");
    int sum = std::stoi(raw.substr(p + 3, 3));
    char bad[8];
    std::snprintf(bad, sizeof bad, "%03d", (sum + 1) % 256);
    raw.replace(p + 3, 3, bad);
    if (s->m_pResponder) s->m_pResponder->send(raw);
  }

  // As an LP that lost our last `back` messages: expect them again and
  // ask for them (BeginSeqNo = that number, EndSeqNo = 0, infinity).
  void resend(int back) {
    FIX::Session* s = session();
    if (!s) return;
    int begin = s->getExpectedTargetNum() - back;
    if (begin < 1) begin = 1;
    s->setNextTargetMsgSeqNum(begin);
    FIX44::ResendRequest rr(FIX::BeginSeqNo(begin), FIX::EndSeqNo(0));
    FIX::Session::sendToTarget(rr, sid_);
  }

  void gap(int n) {
    FIX::Session* s = session();
    if (s) s->setNextSenderMsgSeqNum(s->getExpectedSenderNum() + n);
  }

  std::string status() {
    std::ostringstream o;
    std::lock_guard<std::mutex> l(subs_mutex_);
    o << "in=" << in_count << " out=" << out_count << " suppressed=" << suppressed
      << " quotes=" << quotes << " subscriptions=" << subs_.size();
    return o.str();
  }

 private:
  std::map<std::string, Quote> symbols_;
  FIX::SessionID sid_;
  std::mutex subs_mutex_;
  std::vector<Sub> subs_;
  std::atomic<bool> muted_{false};
  std::atomic<long> logon_at_{0};
};

static bool on_off(const std::string& v, std::atomic<bool>& flag) {
  if (v == "on") flag = true;
  else if (v == "off") flag = false;
  else return false;
  return true;
}

static bool command(Lp& lp, const std::string& line) {
  std::istringstream in(line);
  std::string cmd, a, b;
  in >> cmd >> a >> b;
  Switches& sw = lp.sw;
  if (cmd == "data") return on_off(a, sw.data);
  if (cmd == "heartbeats") return on_off(a, sw.heartbeats);
  if (cmd == "test-reply") return on_off(a, sw.test_reply);
  if (cmd == "logon-reply") return on_off(a, sw.logon_reply);
  if (cmd == "silent") return on_off(a, sw.silent);
  if (cmd == "silent-after-logon") return on_off(a, sw.silent_after_logon);
  if (cmd == "rate" && !a.empty()) { sw.rate = std::stoi(a); return true; }
  if (cmd == "garble" && !a.empty()) {
    for (int i = 0; i < std::stoi(a); i++) lp.garble_one();
    return true;
  }
  if (cmd == "gap" && !a.empty()) { lp.gap(std::stoi(a)); return true; }
  if (cmd == "resend" && !a.empty()) { lp.resend(std::stoi(a)); return true; }
  if (cmd == "logout") {
    // Session::logout() would also disable the session (no logon until
    // re-enabled); an LP that logs a session out takes it back later.
    if (FIX::Session* s = lp.session()) {
      FIX::Locker l(s->m_mutex);
      if (s->isLoggedOn()) s->generateLogout("quickfix-lp: logout requested");
    }
    return true;
  }
  if (cmd == "auth") {
    std::lock_guard<std::mutex> l(sw.auth_mutex);
    sw.user = a == "off" ? "" : a;
    sw.password = a == "off" ? "" : b;
    return a == "off" || !b.empty();
  }
  if (cmd == "flap" && !a.empty()) { sw.flap_ms = std::stol(a); return true; }
  if (cmd == "reset-logon") { lp.reset_logon(); return true; }
  if (cmd == "seqreset" && !a.empty()) { lp.seqreset(std::stoi(a)); return true; }
  if (cmd == "delete" && (a == "bid" || a == "ask")) {
    int side = a == "bid" ? 0 : 1;
    sw.deleted_side = side;
    lp.side_update(side, '2');
    return true;
  }
  if (cmd == "restore") {
    int side = sw.deleted_side.exchange(-1);
    if (side >= 0) lp.side_update(side, '0');
    return true;
  }
  if (cmd == "mdreject") { lp.mdreject(); return true; }
  if (cmd == "disconnect") {
    if (FIX::Session* s = lp.session()) s->disconnect();
    return true;
  }
  if (cmd == "status") { say("STATUS " + lp.status()); return true; }
  return false;
}

static std::string settings_text(int port, const std::string& dict, const std::string& sender,
                                 const std::string& target) {
  std::ostringstream s;
  s << "[DEFAULT]\nConnectionType=acceptor\nSocketAcceptPort=" << port
    << "\nStartTime=00:00:00\nEndTime=00:00:00\nUseDataDictionary=Y\nDataDictionary=" << dict
    << "\nValidateUserDefinedFields=Y\nValidateFieldsOutOfOrder=Y\nValidateFieldsHaveValues=Y"
    << "\nAllowUnknownMsgFields=N\nCheckLatency=Y\nMaxLatency=30\nResetOnLogon=Y"
    << "\nResetOnLogout=Y\nResetOnDisconnect=Y\nPersistMessages=N\nSocketNodelay=Y"
    << "\n[SESSION]\nBeginString=FIX.4.4\nSenderCompID=" << sender
    << "\nTargetCompID=" << target << "\n";
  return s.str();
}

int main(int argc, char** argv) {
  int port = 0;
  std::string dict, sender = "LP", target = "PRICEWIRE", auth;
  std::map<std::string, Quote> symbols;
  std::vector<std::string> early;  // flags that map onto commands
  for (int i = 1; i < argc; i++) {
    std::string f = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (f == "--port") port = std::stoi(next());
    else if (f == "--dict") dict = next();
    else if (f == "--sender") sender = next();
    else if (f == "--target") target = next();
    else if (f == "--rate") early.push_back("rate " + next());
    else if (f == "--auth") {
      std::string v = next();
      size_t c = v.find(':');
      early.push_back("auth " + v.substr(0, c) + " " + (c == std::string::npos ? "" : v.substr(c + 1)));
    } else if (f == "--symbol") {
      std::string v = next();
      size_t e = v.find('=');
      if (e == std::string::npos) { say("ERR bad --symbol " + v); return 2; }
      std::string p = v.substr(e + 1);
      size_t c = p.find(':');
      int digits = c == std::string::npos ? 5 : std::stoi(p.substr(c + 1));
      symbols[v.substr(0, e)] = Quote{std::stod(p.substr(0, c)), digits};
    } else if (f == "--no-data") early.push_back("data off");
    else if (f == "--no-heartbeats") early.push_back("heartbeats off");
    else if (f == "--no-test-reply") early.push_back("test-reply off");
    else if (f == "--no-logon-reply") early.push_back("logon-reply off");
    else if (f == "--silent") early.push_back("silent on");
    else if (f == "--silent-after-logon") early.push_back("silent-after-logon on");
    else if (f == "--flap") early.push_back("flap " + next());
    else { say("ERR unknown flag " + f); return 2; }
  }
  if (port <= 0 || dict.empty()) { say("ERR need --port and --dict"); return 2; }
  if (symbols.empty()) symbols["EURUSD"] = Quote{1.0812, 5};
  Lp lp(symbols);
  for (auto& c : early) {
    if (!command(lp, c)) { say("ERR bad flag value: " + c); return 2; }
  }
  try {
    std::istringstream text(settings_text(port, dict, sender, target));
    FIX::SessionSettings settings(text);
    FIX::MemoryStoreFactory store;
    PrintLogFactory logs;
    FIX::ThreadedSocketAcceptor acceptor(lp, store, settings, logs);
    acceptor.start();
    std::atomic<bool> run{true};
    std::thread streamer([&]() {
      long n = 0;
      while (run) {
        int rate = lp.sw.rate > 0 ? int(lp.sw.rate) : 1;
        std::this_thread::sleep_for(std::chrono::microseconds(1000000 / rate));
        lp.stream_once(n++);
        lp.flap_due();
      }
    });
    say("READY " + std::to_string(port));
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      if (line == "quit") break;
      try {
        say(command(lp, line) ? "OK " + line : "ERR " + line);
      } catch (std::exception& e) {
        say(std::string("ERR ") + e.what());
      }
    }
    run = false;
    streamer.join();
    acceptor.stop(true);
  } catch (std::exception& e) {
    say(std::string("ERR ") + e.what());
    return 1;
  }
  return 0;
}
