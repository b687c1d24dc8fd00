// qpid-jms checks against a real tandemd, run by test/jms/jms.test.ts in ONE JVM (the
// machine is small): each check runs in its own connection, records ok or the error, and
// the whole run prints one JSON object. Usage: Checks <amqp-url> <check>...
import jakarta.jms.*;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.apache.qpid.jms.JmsTopic;
import java.util.*;
import jakarta.jms.Queue;

public class Checks {
  interface Check { Object run(ConnectionFactory cf) throws Exception; }

  static final Map<String, Check> CHECKS = new LinkedHashMap<>();
  static {
    CHECKS.put("sendToPython", Checks::sendToPython);
    CHECKS.put("receiveFromPython", Checks::receiveFromPython);
    CHECKS.put("roundTrip", Checks::roundTrip);
    CHECKS.put("transactions", Checks::transactions);
    CHECKS.put("clientAcknowledge", Checks::clientAcknowledge);
    CHECKS.put("browser", Checks::browser);
    CHECKS.put("temporaryQueueRequestReply", Checks::temporaryQueueRequestReply);
    CHECKS.put("selector", Checks::selector);
    CHECKS.put("topic", Checks::topic);
    CHECKS.put("sharedSubscription", Checks::sharedSubscription);
    CHECKS.put("durableSubscription", Checks::durableSubscription);
    CHECKS.put("subscriptionKinds", Checks::subscriptionKinds);
    CHECKS.put("kindsBeforeRestart", Checks::kindsBeforeRestart);
    CHECKS.put("kindsAfterRestart", Checks::kindsAfterRestart);
    CHECKS.put("headers", Checks::headers);
    CHECKS.put("priorityOrder", Checks::priorityOrder);
    CHECKS.put("expiry", Checks::expiry);
    CHECKS.put("redeliveryCounts", Checks::redeliveryCounts);
    CHECKS.put("selectorsEverywhere", Checks::selectorsEverywhere);
    CHECKS.put("noLocal", Checks::noLocal);
    CHECKS.put("temporaryTopic", Checks::temporaryTopic);
    CHECKS.put("temporaryQueueLifetime", Checks::temporaryQueueLifetime);
    CHECKS.put("acknowledgeModes", Checks::acknowledgeModes);
    CHECKS.put("transactionConsumerClosed", Checks::transactionConsumerClosed);
    CHECKS.put("messageIds", Checks::messageIds);
    CHECKS.put("largeMessage", Checks::largeMessage);
  }

  public static void main(String[] args) {
    ConnectionFactory cf = new JmsConnectionFactory(args[0]);
    StringBuilder out = new StringBuilder("{");
    for (int i = 1; i < args.length; i++) {
      Check check = CHECKS.get(args[i]);
      Object result;
      boolean ok;
      try {
        result = check.run(cf);
        ok = true;
      } catch (Throwable e) {
        result = e.getClass().getSimpleName() + ": " + e.getMessage();
        ok = false;
      }
      if (i > 1) out.append(',');
      out.append(Json.of(args[i])).append(":{\"ok\":").append(ok).append(",\"result\":").append(Json.of(result)).append('}');
    }
    System.out.println(out.append('}'));
    System.exit(0);
  }

  /** One message of every JMS type, each with the same headers and every property type. */
  static List<Message> everyType(Session s, Destination replyTo) throws JMSException {
    List<Message> all = new ArrayList<>();
    all.add(s.createTextMessage("text body"));
    BytesMessage b = s.createBytesMessage();
    b.writeBytes(new byte[] {1, 2, 3, (byte) 255});
    all.add(b);
    MapMessage m = s.createMapMessage();
    m.setString("s", "v");
    m.setInt("i", 42);
    m.setBoolean("b", true);
    all.add(m);
    StreamMessage st = s.createStreamMessage();
    st.writeString("one");
    st.writeInt(2);
    all.add(st);
    all.add(s.createObjectMessage(new ArrayList<>(List.of("object", "body"))));
    all.add(s.createMessage());
    int n = 0;
    for (Message msg : all) {
      msg.setJMSCorrelationID("corr-" + n);
      msg.setJMSReplyTo(replyTo);
      msg.setJMSType("type-" + n);
      msg.setStringProperty("pString", "str");
      msg.setIntProperty("pInt", 7);
      msg.setLongProperty("pLong", 1L << 40);
      msg.setShortProperty("pShort", (short) 3);
      msg.setByteProperty("pByte", (byte) 4);
      msg.setBooleanProperty("pBool", true);
      msg.setDoubleProperty("pDouble", 1.5);
      msg.setFloatProperty("pFloat", 2.5f);
      msg.setIntProperty("index", n++);
    }
    return all;
  }

  static Map<String, Object> describe(Message msg) throws JMSException {
    Map<String, Object> d = new LinkedHashMap<>();
    d.put("class", msg.getClass().getSimpleName().replace("Jms", ""));
    d.put("correlationId", msg.getJMSCorrelationID());
    d.put("replyTo", msg.getJMSReplyTo() == null ? null : msg.getJMSReplyTo().toString());
    d.put("type", msg.getJMSType());
    d.put("priority", msg.getJMSPriority());
    d.put("persistent", msg.getJMSDeliveryMode() == DeliveryMode.PERSISTENT);
    d.put("hasExpiration", msg.getJMSExpiration() > 0);
    d.put("redelivered", msg.getJMSRedelivered());
    Map<String, Object> props = new TreeMap<>();
    for (Enumeration<?> e = msg.getPropertyNames(); e.hasMoreElements();) {
      String k = (String) e.nextElement();
      if (!k.startsWith("JMSX")) props.put(k, msg.getObjectProperty(k) + ":" + msg.getObjectProperty(k).getClass().getSimpleName());
    }
    d.put("properties", props);
    if (msg instanceof TextMessage t) d.put("body", t.getText());
    else if (msg instanceof BytesMessage b) {
      byte[] buf = new byte[(int) b.getBodyLength()];
      b.readBytes(buf);
      d.put("body", Arrays.toString(buf));
    } else if (msg instanceof MapMessage m) {
      Map<String, Object> body = new TreeMap<>();
      for (Enumeration<?> e = m.getMapNames(); e.hasMoreElements();) {
        String k = (String) e.nextElement();
        body.put(k, m.getObject(k));
      }
      d.put("body", body.toString());
    } else if (msg instanceof StreamMessage st) {
      List<Object> body = new ArrayList<>();
      try {
        while (true) body.add(st.readObject());
      } catch (MessageEOFException eof) {
        // the end of the stream
      }
      d.put("body", body.toString());
    } else if (msg instanceof ObjectMessage o) d.put("body", String.valueOf(o.getObject()));
    return d;
  }

  static Object sendToPython(ConnectionFactory cf) throws Exception {
    try (Connection c = cf.createConnection()) {
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      MessageProducer p = s.createProducer(s.createQueue("jms.to.py"));
      int n = 0;
      for (Message msg : everyType(s, s.createQueue("jms.replies"))) {
        p.send(msg, n % 2 == 0 ? DeliveryMode.PERSISTENT : DeliveryMode.NON_PERSISTENT, 7, 600_000);
        n++;
      }
      return n;
    }
  }

  static Object receiveFromPython(ConnectionFactory cf) throws Exception {
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      MessageConsumer consumer = s.createConsumer(s.createQueue("py.to.jms"));
      List<Object> got = new ArrayList<>();
      // Exactly what jms_peer.py sends: a receive that finds nothing makes qpid-jms drain.
      for (int i = 0; i < 5; i++) got.add(describe(require(consumer.receive(5000))));
      return got;
    }
  }

  static Object roundTrip(ConnectionFactory cf) throws Exception {
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Queue q = s.createQueue("jms.roundtrip");
      MessageProducer p = s.createProducer(q);
      List<Message> sent = everyType(s, s.createQueue("jms.replies"));
      for (Message m : sent) p.send(m, DeliveryMode.PERSISTENT, 6, 600_000);
      MessageConsumer consumer = s.createConsumer(q);
      List<Object> got = new ArrayList<>();
      for (int i = 0; i < sent.size(); i++) got.add(describe(require(consumer.receive(5000))));
      return got;
    }
  }

  static Message require(Message m) {
    if (m == null) throw new java.lang.IllegalStateException("no message within 5 s");
    return m;
  }

  static String text(Message m) throws JMSException {
    return m == null ? null : ((TextMessage) m).getText();
  }

  static Object transactions(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(true, Session.SESSION_TRANSACTED);
      Queue q = s.createQueue("jms.tx");
      MessageProducer p = s.createProducer(q);
      MessageConsumer consumer = s.createConsumer(q);
      p.send(s.createTextMessage("rolled-back"));
      s.rollback();
      p.send(s.createTextMessage("committed"));
      s.commit();
      r.put("afterCommit", text(consumer.receive(5000)));
      s.rollback();
      Message again = consumer.receive(5000);
      r.put("afterRollback", text(again));
      r.put("redelivered", again != null && again.getJMSRedelivered());
      s.commit();
      r.put("afterFinalCommit", text(consumer.receive(1000)));
    }
    return r;
  }

  static Object clientAcknowledge(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.CLIENT_ACKNOWLEDGE);
      Queue q = s.createQueue("jms.clientack");
      MessageProducer p = s.createProducer(q);
      p.send(s.createTextMessage("acked"));
      p.send(s.createTextMessage("unacked"));
      MessageConsumer consumer = s.createConsumer(q);
      Message first = consumer.receive(5000);
      first.acknowledge();
      r.put("first", text(first));
      r.put("second", text(consumer.receive(5000)));
      s.close();
      Session s2 = c.createSession(false, Session.CLIENT_ACKNOWLEDGE);
      MessageConsumer c2 = s2.createConsumer(q);
      Message again = c2.receive(5000);
      r.put("redelivered", text(again));
      r.put("redeliveredFlag", again != null && again.getJMSRedelivered());
      again.acknowledge();
      r.put("left", text(c2.receive(1000)));
    }
    return r;
  }

  static Object browser(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Queue q = s.createQueue("jms.browse");
      MessageProducer p = s.createProducer(q);
      for (int i = 0; i < 3; i++) p.send(s.createTextMessage("b" + i));
      List<String> seen = new ArrayList<>();
      try (QueueBrowser b = s.createBrowser(q)) {
        for (Enumeration<?> e = b.getEnumeration(); e.hasMoreElements();) seen.add(text((Message) e.nextElement()));
      }
      r.put("browsed", seen);
      MessageConsumer consumer = s.createConsumer(q);
      List<String> consumed = new ArrayList<>();
      for (Message m; (m = consumer.receive(2000)) != null;) consumed.add(text(m));
      r.put("consumedAfter", consumed);
    }
    return r;
  }

  static Object temporaryQueueRequestReply(ConnectionFactory cf) throws Exception {
    try (Connection server = cf.createConnection(); Connection client = cf.createConnection()) {
      server.start();
      client.start();
      Session ss = server.createSession(false, Session.AUTO_ACKNOWLEDGE);
      MessageConsumer requests = ss.createConsumer(ss.createQueue("jms.requests"));
      MessageProducer replier = ss.createProducer(null);
      requests.setMessageListener((m) -> {
        try {
          TextMessage reply = ss.createTextMessage("reply to " + text(m));
          reply.setJMSCorrelationID(m.getJMSMessageID());
          replier.send(m.getJMSReplyTo(), reply);
        } catch (JMSException e) {
          throw new RuntimeException(e);
        }
      });
      Session cs = client.createSession(false, Session.AUTO_ACKNOWLEDGE);
      TemporaryQueue tmp = cs.createTemporaryQueue();
      MessageConsumer replies = cs.createConsumer(tmp);
      TextMessage req = cs.createTextMessage("ping");
      req.setJMSReplyTo(tmp);
      cs.createProducer(cs.createQueue("jms.requests")).send(req);
      Message reply = require(replies.receive(5000));
      Map<String, Object> r = new LinkedHashMap<>();
      r.put("reply", text(reply));
      r.put("correlated", req.getJMSMessageID().equals(reply.getJMSCorrelationID()));
      r.put("tempQueue", tmp.getQueueName());
      return r;
    }
  }

  static Object selector(ConnectionFactory cf) throws Exception {
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Queue q = s.createQueue("jms.selector");
      MessageProducer p = s.createProducer(q);
      TextMessage red = s.createTextMessage("red");
      red.setStringProperty("colour", "red");
      TextMessage blue = s.createTextMessage("blue");
      blue.setStringProperty("colour", "blue");
      p.send(red);
      p.send(blue);
      MessageConsumer consumer = s.createConsumer(q, "colour = 'blue'");
      // Reached only if the broker accepted the selector: report what it delivered.
      return "accepted; first delivered: " + text(consumer.receive(3000));
    }
  }

  static Object topic(ConnectionFactory cf) throws Exception {
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Topic t = s.createTopic("amq.topic/news.sport");
      MessageConsumer a = s.createConsumer(t);
      MessageConsumer b = s.createConsumer(s.createTopic("amq.topic/news.*"));
      MessageProducer p = s.createProducer(s.createTopic("amq.topic/news.sport"));
      p.send(s.createTextMessage("goal"));
      Map<String, Object> r = new LinkedHashMap<>();
      r.put("exact", text(a.receive(5000)));
      r.put("wildcard", text(b.receive(5000)));
      return r;
    }
  }

  static Object durableSubscription(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    Topic t;
    try (Connection c = cf.createConnection()) {
      c.setClientID("durable-check");
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      t = s.createTopic("amq.topic/durable.t");
      s.createDurableConsumer(t, "dsub").close();
      MessageProducer p = s.createProducer(t);
      p.send(s.createTextMessage("while away 1"));
      p.send(s.createTextMessage("while away 2"));
    }
    try (Connection c = cf.createConnection()) {
      c.setClientID("durable-check");
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      MessageConsumer d = s.createDurableConsumer(t, "dsub");
      r.put("afterReattach", List.of(String.valueOf(text(d.receive(5000))), String.valueOf(text(d.receive(5000)))));
      try {
        s.createDurableConsumer(t, "dsub");
        r.put("secondConsumer", "allowed");
      } catch (JMSException e) {
        r.put("secondConsumer", "refused");
      }
      d.close();
      s.unsubscribe("dsub");
      s.createProducer(t).send(s.createTextMessage("after unsubscribe"));
      MessageConsumer fresh = s.createDurableConsumer(t, "dsub");
      r.put("afterUnsubscribe", text(fresh.receive(1000)));
      fresh.close();
      s.unsubscribe("dsub");
      try {
        s.unsubscribe("no-such-subscription");
        r.put("unknownUnsubscribe", "allowed");
      } catch (JMSException e) {
        r.put("unknownUnsubscribe", "refused");
      }
    }
    return r;
  }

  interface SessionAction { Object run(Session s) throws JMSException; }

  /** One connection with `clientID`, started: what `action` returns, or "refused: <message>" for a JMSException. */
  static Object withClient(ConnectionFactory cf, String clientID, SessionAction action) throws JMSException {
    try (Connection c = cf.createConnection()) {
      c.setClientID(clientID);
      c.start();
      try {
        return action.run(c.createSession(false, Session.AUTO_ACKNOWLEDGE));
      } catch (JMSException e) {
        return "refused: " + e.getMessage();
      }
    }
  }

  /** A durable subscription made, then its consumer closed (the subscription stays). */
  static Object subscribe(ConnectionFactory cf, String clientID, Topic t, String name, boolean shared) throws JMSException {
    return withClient(cf, clientID, (s) -> {
      (shared ? s.createSharedDurableConsumer(t, name) : s.createDurableConsumer(t, name)).close();
      return "made";
    });
  }

  /** A message sent to `t` reaches the durable subscription `name`, then it is unsubscribed. */
  static Object receiveAndUnsubscribe(ConnectionFactory cf, String clientID, Topic t, String name, boolean shared) throws JMSException {
    return withClient(cf, clientID, (s) -> {
      MessageConsumer m = shared ? s.createSharedDurableConsumer(t, name) : s.createDurableConsumer(t, name);
      s.createProducer(t).send(s.createTextMessage("to " + name));
      String got = text(m.receive(5000));
      m.close();
      s.unsubscribe(name);
      return got;
    });
  }

  /**
   * JMS 2.0: a shared and an unshared durable subscription may not have the same name and
   * clientID. Each second attempt, in either order, must fail; after an unsubscribe, the
   * other kind may take the name.
   */
  static Object subscriptionKinds(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    String id = "kinds-check";
    // A topic per name: what one receives is no other's copy.
    Topic t1 = new JmsTopic("amq.topic/kinds.1");
    Topic t2 = new JmsTopic("amq.topic/kinds.2");
    r.put("unshared", subscribe(cf, id, t1, "k1", false));
    r.put("sharedAfterUnshared", subscribe(cf, id, t1, "k1", true));
    r.put("shared", subscribe(cf, id, t2, "k2", true));
    r.put("unsharedAfterShared", subscribe(cf, id, t2, "k2", false));
    // Each still works as the kind it was made as, and unsubscribing frees the name.
    r.put("unsharedKept", receiveAndUnsubscribe(cf, id, t1, "k1", false));
    r.put("sharedKept", receiveAndUnsubscribe(cf, id, t2, "k2", true));
    r.put("sharedAfterUnsubscribe", receiveAndUnsubscribe(cf, id, t1, "k1", true));
    r.put("unsharedAfterUnsubscribe", receiveAndUnsubscribe(cf, id, t2, "k2", false));
    return r;
  }

  /** Run before a restart (test/jms/subscription-kinds.test.ts): one subscription of each kind. */
  static Object kindsBeforeRestart(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    r.put("unshared", subscribe(cf, "restart-kinds", new JmsTopic("amq.topic/restart.1"), "r1", false));
    r.put("shared", subscribe(cf, "restart-kinds", new JmsTopic("amq.topic/restart.2"), "r2", true));
    return r;
  }

  /** ...and after it: the other kind of each is still refused; each is still its own kind. */
  static Object kindsAfterRestart(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    Topic t1 = new JmsTopic("amq.topic/restart.1");
    Topic t2 = new JmsTopic("amq.topic/restart.2");
    r.put("sharedAfterUnshared", subscribe(cf, "restart-kinds", t1, "r1", true));
    r.put("unsharedAfterShared", subscribe(cf, "restart-kinds", t2, "r2", false));
    r.put("unsharedKept", receiveAndUnsubscribe(cf, "restart-kinds", t1, "r1", false));
    r.put("sharedKept", receiveAndUnsubscribe(cf, "restart-kinds", t2, "r2", true));
    return r;
  }

  static Object sharedSubscription(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.setClientID("shared-check");
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Topic t = s.createTopic("amq.topic/shared.t");
      MessageConsumer a = s.createSharedConsumer(t, "sub1");
      MessageConsumer b = s.createSharedConsumer(t, "sub1");
      MessageConsumer other = s.createSharedConsumer(t, "sub2");
      MessageProducer p = s.createProducer(t);
      for (int i = 0; i < 4; i++) p.send(s.createTextMessage("s" + i));
      List<String> fromA = new ArrayList<>();
      List<String> fromB = new ArrayList<>();
      List<String> fromOther = new ArrayList<>();
      for (Message m; (m = a.receive(1500)) != null;) fromA.add(text(m));
      for (Message m; (m = b.receive(1500)) != null;) fromB.add(text(m));
      for (Message m; (m = other.receive(1500)) != null;) fromOther.add(text(m));
      r.put("sub1", fromA.size() + fromB.size());
      r.put("bothGotSome", !fromA.isEmpty() && !fromB.isEmpty());
      r.put("sub2", fromOther);
    }
    // A shared durable subscription without a clientID (global): kept while nobody is attached.
    try (Connection c = cf.createConnection()) {
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Topic t = s.createTopic("amq.topic/shared.d");
      s.createSharedDurableConsumer(t, "gsub").close();
      s.createProducer(t).send(s.createTextMessage("kept"));
    }
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      MessageConsumer g = s.createSharedDurableConsumer(s.createTopic("amq.topic/shared.d"), "gsub");
      r.put("sharedDurable", text(g.receive(5000)));
      g.close();
      s.unsubscribe("gsub");
    }
    return r;
  }

  /** What a JMSException says, or "ok" when `action` went through. */
  interface Attempt { void run() throws JMSException; }

  static String attempt(Attempt action) {
    try {
      action.run();
      return "ok";
    } catch (JMSException e) {
      return "refused: " + e.getMessage();
    }
  }

  /** Every message `consumer` has within `ms` of each other (at most 100), as text. */
  static List<String> drain(MessageConsumer consumer, long ms) throws JMSException {
    List<String> got = new ArrayList<>();
    for (Message m; got.size() < 100 && (m = consumer.receive(ms)) != null;) got.add(text(m));
    return got;
  }

  static String kind(Destination d) {
    if (d instanceof TemporaryQueue) return "TemporaryQueue";
    if (d instanceof TemporaryTopic) return "TemporaryTopic";
    if (d instanceof Queue) return "Queue";
    return d instanceof Topic ? "Topic" : String.valueOf(d);
  }

  /**
   * JMSCorrelationID as bytes, as an "ID:" string and as a plain string; JMSReplyTo of each
   * destination kind; JMSDestination of a queue and a topic; JMSMessageID, JMSTimestamp,
   * JMSType and JMSXGroupID/JMSXGroupSeq arrive as sent.
   */
  static Object headers(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Queue q = s.createQueue("jms.headers");
      Topic t = s.createTopic("amq.topic/headers.t");
      Destination[] replyTo = {q, t, s.createTemporaryQueue(), s.createTemporaryTopic()};
      MessageProducer p = s.createProducer(q);
      List<Message> sent = new ArrayList<>();
      for (int i = 0; i < replyTo.length; i++) {
        Message m = s.createTextMessage("h" + i);
        if (i == 0) m.setJMSCorrelationIDAsBytes(new byte[] {1, 2, 3, (byte) 200});
        else m.setJMSCorrelationID(i == 1 ? "ID:an-id" : "plain-" + i);
        m.setJMSReplyTo(replyTo[i]);
        m.setStringProperty("JMSXGroupID", "g");
        m.setIntProperty("JMSXGroupSeq", i + 1);
        p.send(m);
        sent.add(m);
      }
      MessageConsumer consumer = s.createConsumer(q);
      List<Object> got = new ArrayList<>();
      for (int i = 0; i < replyTo.length; i++) {
        Message m = require(consumer.receive(5000));
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("correlationId", i == 0 ? Arrays.toString(m.getJMSCorrelationIDAsBytes()) : m.getJMSCorrelationID());
        d.put("replyTo", kind(m.getJMSReplyTo()));
        d.put("replyToSame", replyTo[i].equals(m.getJMSReplyTo()));
        d.put("destination", kind(m.getJMSDestination()) + " " + m.getJMSDestination());
        d.put("idAndTimestampSame", m.getJMSMessageID().equals(sent.get(i).getJMSMessageID()) && m.getJMSTimestamp() == sent.get(i).getJMSTimestamp());
        d.put("group", m.getStringProperty("JMSXGroupID") + "/" + m.getIntProperty("JMSXGroupSeq"));
        got.add(d);
      }
      r.put("queue", got);
      MessageConsumer sub = s.createConsumer(t);
      TextMessage typed = s.createTextMessage("typed");
      typed.setJMSType("a-type");
      s.createProducer(t).send(typed);
      Message m = require(sub.receive(5000));
      r.put("topic", kind(m.getJMSDestination()) + " " + m.getJMSDestination() + " " + m.getJMSType());
    }
    return r;
  }

  /** Delivery order by JMSPriority: on a queue declared with --priorities 10, and on an ordinary (FIFO) one. */
  static Object priorityOrder(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      for (String name : new String[] {"jms.priorities", "jms.fifo"}) {
        Queue q = s.createQueue(name);
        MessageProducer p = s.createProducer(q);
        for (int priority : new int[] {1, 9, 4, 0, 7}) p.send(s.createTextMessage("p" + priority), DeliveryMode.PERSISTENT, priority, 0);
        // The consumer comes after the sends, so the queue decides the order.
        MessageConsumer consumer = s.createConsumer(q);
        r.put(name, drain(consumer, 1000));
        consumer.close();
      }
    }
    return r;
  }

  /** A message whose time-to-live ran out while queued is not delivered; the others are, with JMSExpiration set or not. */
  static Object expiry(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Queue q = s.createQueue("jms.expiry");
      MessageProducer p = s.createProducer(q);
      p.setTimeToLive(100);
      p.send(s.createTextMessage("expires"));
      p.setTimeToLive(600_000);
      p.send(s.createTextMessage("in ten minutes"));
      p.setTimeToLive(0);
      p.send(s.createTextMessage("never"));
      // Past the first one's 100 ms, however slow the machine: expired is expired from then on.
      Thread.sleep(1000);
      MessageConsumer consumer = s.createConsumer(q);
      List<String> got = new ArrayList<>();
      for (Message m; (m = consumer.receive(1000)) != null;) got.add(text(m) + (m.getJMSExpiration() > System.currentTimeMillis() ? " (expiration set)" : m.getJMSExpiration() == 0 ? " (no expiration)" : " (expired!)"));
      r.put("delivered", got);
    }
    return r;
  }

  /** JMSRedelivered and JMSXDeliveryCount after session.recover() and after a rollback. */
  static Object redeliveryCounts(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.CLIENT_ACKNOWLEDGE);
      Queue q = s.createQueue("jms.recover");
      s.createProducer(q).send(s.createTextMessage("r"));
      MessageConsumer consumer = s.createConsumer(q);
      List<String> seen = new ArrayList<>();
      for (int i = 0; i < 3; i++) {
        Message m = require(consumer.receive(5000));
        seen.add(m.getJMSRedelivered() + "/" + m.getIntProperty("JMSXDeliveryCount"));
        if (i < 2) s.recover();
        else m.acknowledge();
      }
      r.put("recover", seen);
      r.put("recoverLeft", text(consumer.receive(500)));
    }
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(true, Session.SESSION_TRANSACTED);
      Queue q = s.createQueue("jms.rollback");
      s.createProducer(q).send(s.createTextMessage("r"));
      s.commit();
      MessageConsumer consumer = s.createConsumer(q);
      List<String> seen = new ArrayList<>();
      for (int i = 0; i < 3; i++) {
        Message m = require(consumer.receive(5000));
        seen.add(m.getJMSRedelivered() + "/" + m.getIntProperty("JMSXDeliveryCount"));
        if (i < 2) s.rollback();
        else s.commit();
      }
      r.put("rollback", seen);
      r.put("rollbackLeft", text(consumer.receive(500)));
    }
    return r;
  }

  /** Selectors are taken wherever qpid-jms sends one: topic, durable and shared subscriptions, browsers (test/jms/selectors.test.ts checks what they select). An empty selector is none. */
  static Object selectorsEverywhere(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.setClientID("selectors-check");
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Topic t = s.createTopic("amq.topic/selectors.t");
      Queue q = s.createQueue("jms.selectors");
      r.put("topic", attempt(() -> s.createConsumer(t, "a = 1")));
      r.put("durable", attempt(() -> s.createDurableConsumer(t, "sel-d", "a = 1", false)));
      r.put("shared", attempt(() -> s.createSharedConsumer(t, "sel-s", "a = 1")));
      r.put("browser", attempt(() -> s.createBrowser(q, "a = 1").getEnumeration().hasMoreElements()));
      r.put("empty", attempt(() -> s.createConsumer(q, "").close()));
    }
    return r;
  }

  /**
   * noLocal: a topic consumer does not get what its own connection publishes (transacted
   * sends included), others' it does; a durable subscription leaves out its clientID's
   * messages, from a later connection with that clientID too, and taken again without
   * noLocal it is a new subscription; on a queue noLocal is not applied (JMS leaves it open).
   */
  static Object noLocal(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection other = cf.createConnection()) {
      Session os = other.createSession(false, Session.AUTO_ACKNOWLEDGE);
      MessageProducer op = os.createProducer(os.createTopic("amq.topic/nolocal.t"));
      try (Connection c = cf.createConnection()) {
        c.setClientID("no-local-check");
        c.start();
        Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
        Topic t = s.createTopic("amq.topic/nolocal.t");
        MessageConsumer noLocal = s.createConsumer(t, null, true);
        MessageConsumer plain = s.createConsumer(t);
        s.createDurableConsumer(t, "no-local-d", null, true).close();
        s.createProducer(t).send(s.createTextMessage("own-1"));
        op.send(os.createTextMessage("other-1"));
        tx.createProducer(t).send(tx.createTextMessage("own-tx"));
        tx.commit();
        op.send(os.createTextMessage("other-2"));
        r.put("consumer", drain(noLocal, 1000));
        r.put("plain", drain(plain, 1000));
      }
      try (Connection c = cf.createConnection()) {
        c.setClientID("no-local-check");
        c.start();
        Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Topic t = s.createTopic("amq.topic/nolocal.t");
        s.createProducer(t).send(s.createTextMessage("own-2"));
        MessageConsumer durable = s.createDurableConsumer(t, "no-local-d", null, true);
        r.put("durable", drain(durable, 1000));
        durable.close();
        durable = s.createDurableConsumer(t, "no-local-d", null, false);
        s.createProducer(t).send(s.createTextMessage("own-3"));
        r.put("durableReplaced", drain(durable, 1000));
        durable.close();
        s.unsubscribe("no-local-d");
        Queue q = s.createQueue("jms.nolocal.q");
        s.createProducer(q).send(s.createTextMessage("q-own"));
        r.put("queue", drain(s.createConsumer(q, null, true), 1000));
      }
    }
    return r;
  }

  /**
   * A temporary topic is a topic: every consumer gets every message, what is sent while none
   * is attached is dropped, another connection may publish to it (a reply-to) but not consume
   * from it, and after delete() a publisher is refused.
   */
  static Object temporaryTopic(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection(); Connection other = cf.createConnection()) {
      c.start();
      other.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Session os = other.createSession(false, Session.AUTO_ACKNOWLEDGE);
      TemporaryTopic tt = s.createTemporaryTopic();
      s.createProducer(tt).send(s.createTextMessage("before any consumer"));
      MessageConsumer a = s.createConsumer(tt);
      MessageConsumer b = s.createConsumer(tt);
      s.createProducer(tt).send(s.createTextMessage("t1"));
      os.createProducer(null).send(tt, os.createTextMessage("t2 from another connection"));
      r.put("a", drain(a, 1000));
      r.put("b", drain(b, 1000));
      r.put("otherConsumer", attempt(() -> os.createConsumer(os.createTopic(tt.getTopicName())).close()));
      a.close();
      b.close();
      tt.delete();
      r.put("publishAfterDelete", attempt(() -> os.createProducer(os.createTopic(tt.getTopicName())).send(os.createTextMessage("late"))));
    }
    return r;
  }

  /**
   * A temporary queue lives as long as its connection (or until delete()): its consumer may
   * close and another start, and what was sent in between is kept. A reply sent to it after
   * delete() is refused, not made into a new (durable) queue.
   */
  static Object temporaryQueueLifetime(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection(); Connection other = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Session os = other.createSession(false, Session.AUTO_ACKNOWLEDGE);
      TemporaryQueue tq = s.createTemporaryQueue();
      s.createConsumer(tq).close();
      r.put("sendBetweenConsumers", attempt(() -> os.createProducer(os.createQueue(tq.getQueueName())).send(os.createTextMessage("kept"))));
      MessageConsumer again = s.createConsumer(tq);
      r.put("secondConsumer", text(again.receive(5000)));
      again.close();
      tq.delete();
      r.put("replyAfterDelete", attempt(() -> os.createProducer(os.createQueue(tq.getQueueName())).send(os.createTextMessage("late reply"))));
    }
    return r;
  }

  /**
   * CLIENT_ACKNOWLEDGE: acknowledge() acknowledges every message the session consumed,
   * earlier ones and later ones; DUPS_OK_ACKNOWLEDGE consumes as AUTO does.
   */
  static Object acknowledgeModes(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.CLIENT_ACKNOWLEDGE);
      Queue q = s.createQueue("jms.ackall");
      MessageProducer p = s.createProducer(q);
      for (int i = 0; i < 4; i++) p.send(s.createTextMessage("a" + i));
      MessageConsumer consumer = s.createConsumer(q);
      List<Message> got = new ArrayList<>();
      for (int i = 0; i < 3; i++) got.add(require(consumer.receive(5000)));
      got.get(1).acknowledge();
      s.close();
      Session s2 = c.createSession(false, Session.DUPS_OK_ACKNOWLEDGE);
      MessageConsumer c2 = s2.createConsumer(q);
      r.put("afterAcknowledgingTheSecond", drain(c2, 1000));
      s2.close();
      Session s3 = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      r.put("afterDupsOk", text(s3.createConsumer(q).receive(500)));
    }
    return r;
  }

  /** A consumer closed inside a transaction: its receipts still commit, or roll back and come back redelivered. */
  static Object transactionConsumerClosed(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(true, Session.SESSION_TRANSACTED);
      Queue q = s.createQueue("jms.txclose");
      MessageProducer p = s.createProducer(q);
      p.send(s.createTextMessage("c1"));
      p.send(s.createTextMessage("c2"));
      s.commit();
      MessageConsumer first = s.createConsumer(q);
      r.put("committed", text(first.receive(5000)));
      first.close();
      s.commit();
      MessageConsumer second = s.createConsumer(q);
      r.put("rolledBack", text(second.receive(5000)));
      second.close();
      s.rollback();
      MessageConsumer third = s.createConsumer(q);
      Message m = require(third.receive(5000));
      r.put("again", text(m) + (m.getJMSRedelivered() ? " (redelivered)" : ""));
      s.commit();
      r.put("left", text(third.receive(500)));
    }
    return r;
  }

  /**
   * Message ids and the duplicate-detection window: qpid-jms gives each send its own
   * JMSMessageID (the same Message object sent twice is two messages), none with
   * setDisableMessageID (no key: both kept); with --dedup-key _AMQ_DUPL_ID a second
   * message with the same value is dropped.
   */
  static Object messageIds(ConnectionFactory cf) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      for (boolean disabled : new boolean[] {false, true}) {
        Queue q = s.createQueue("jms.dedup");
        MessageProducer p = s.createProducer(q);
        p.setDisableMessageID(disabled);
        TextMessage m = s.createTextMessage(disabled ? "no id" : "with id");
        p.send(m);
        String first = m.getJMSMessageID();
        p.send(m);
        String second = m.getJMSMessageID();
        MessageConsumer consumer = s.createConsumer(q);
        r.put(disabled ? "disabled" : "enabled", Map.of("ids", disabled ? String.valueOf(first) + "," + second : first.equals(second) ? "same" : "distinct", "delivered", drain(consumer, 1000)));
        consumer.close();
      }
      Queue keyed = s.createQueue("jms.dedup.keyed");
      MessageProducer p = s.createProducer(keyed);
      for (int i = 0; i < 2; i++) {
        TextMessage m = s.createTextMessage("order-1 copy " + i);
        m.setStringProperty("_AMQ_DUPL_ID", "order-1");
        p.send(m);
      }
      r.put("keyed", drain(s.createConsumer(keyed), 1000));
    }
    return r;
  }

  /** A 1 MiB BytesMessage, many frames each way, arrives whole. */
  static Object largeMessage(ConnectionFactory cf) throws Exception {
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Queue q = s.createQueue("jms.large");
      byte[] data = new byte[1 << 20];
      new Random(7).nextBytes(data);
      BytesMessage b = s.createBytesMessage();
      b.writeBytes(data);
      s.createProducer(q).send(b);
      BytesMessage got = (BytesMessage) require(s.createConsumer(q).receive(10_000));
      byte[] back = new byte[(int) got.getBodyLength()];
      got.readBytes(back);
      return Arrays.equals(data, back) ? "same " + back.length + " bytes" : "differs";
    }
  }
}
