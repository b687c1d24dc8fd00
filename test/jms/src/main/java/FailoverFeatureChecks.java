// Today's JMS features through qpid-jms' failover: a queue selector, a durable topic
// subscription with a selector and noLocal, and a delayed message, each on a failover:
// URL over a tandem cluster whose primary test/jms/failover-features.test.ts kills with
// SIGKILL (then it promotes a backup). Usage: FailoverFeatureChecks <failover-url> <name-prefix> <drain-seconds>
//
// Five connections, so each fails over on its own:
// - "producer": persistent, synchronous sends to queue <prefix>.colours, blue and red in
//   turn (int property `seq`, string property `colour`); on "delay" from stdin, one
//   message to queue <prefix>.delay with setDeliveryDelay(3000), from a second session.
// - "selector": a CLIENT_ACKNOWLEDGE consumer of <prefix>.colours with `colour = 'blue'`.
// - "plain": a CLIENT_ACKNOWLEDGE consumer of <prefix>.colours without a selector (JMS: it
//   shares the queue with the other, so it takes reds and some blues), and on a second
//   session an AUTO_ACKNOWLEDGE consumer of <prefix>.delay.
// - "durable" (clientID <prefix>-client): a durable subscription <prefix>-sub of topic
//   amq.topic/<prefix>.news with `colour = 'blue'` and noLocal, CLIENT_ACKNOWLEDGE; on a
//   second session it publishes to that topic itself (`from` = own), which the
//   subscription must never get. It stops taking messages on "delay" (just before the
//   kill) until its connection is restored, so the failover finds it with a backlog.
// - "other": publishes blue and red to the topic (`from` = other).
//
// stdout: a progress line (JSON) every 200 ms; after "delay", a line {"event":"delayed"};
// on "stop" the producers stop, the consumers drain (until every acknowledged message has
// arrived and the delayed one has had 1.5 s to arrive twice, or drain-seconds pass), and
// the last line is the result. An arrival is written `<consumer>:<generation>` with `d`
// if its connection was down then (from what qpid-jms had prefetched) and `r` if
// JMSRedelivered; the generation is how many times its connection had been restored.
import jakarta.jms.*;
import org.apache.qpid.jms.JmsConnection;
import org.apache.qpid.jms.JmsConnectionFactory;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.*;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

public class FailoverFeatureChecks {
  /** One named connection and its events (FailoverLink). */
  static final class Link extends FailoverLink {
    final String name;
    JmsConnection connection;

    Link(String name) { this.name = name; }

    /** How an arrival on this connection is written: `<name>:<generation>[d][r]`. */
    String arrival(Message m) throws JMSException {
      return name + ":" + restored.get() + (down ? "d" : "") + (m.getJMSRedelivered() ? "r" : "");
    }

    JmsConnection open(JmsConnectionFactory cf, String clientId) throws JMSException {
      connection = (JmsConnection) cf.createConnection();
      if (clientId != null) connection.setClientID(clientId);
      connection.addConnectionListener(this);
      connection.start();
      return connection;
    }
  }

  /** What one producer sent: the seqs whose send() returned, by colour, and those in doubt. */
  static final class Sent {
    final Set<Integer> blue = ConcurrentHashMap.newKeySet();
    final Set<Integer> red = ConcurrentHashMap.newKeySet();
    final Set<Integer> inDoubt = ConcurrentHashMap.newKeySet();
    final Map<Integer, String> failed = new ConcurrentHashMap<>();
    /** Sends that returned after the producer's connection was restored on the new primary. */
    final AtomicInteger afterFailover = new AtomicInteger();
    int count() { return blue.size() + red.size(); }
  }

  static volatile boolean stop;
  /** Set on "delay", just before the kill: the subscription then takes nothing until its connection is restored. */
  static volatile boolean delayRequested;
  static volatile String error;
  static final Link producerLink = new Link("producer");
  static final Link selectorLink = new Link("selector");
  static final Link plainLink = new Link("plain");
  static final Link durableLink = new Link("durable");
  static final Link otherLink = new Link("other");
  static final List<Link> links = List.of(producerLink, selectorLink, plainLink, durableLink, otherLink);

  static final Sent queueSent = new Sent();
  static final Sent ownSent = new Sent();
  static final Sent otherSent = new Sent();
  /** seq → arrivals, for the queue (both consumers) and for the durable subscription. */
  static final Map<Integer, List<String>> queueArrivals = new ConcurrentHashMap<>();
  static final Map<Integer, List<String>> subscriptionArrivals = new ConcurrentHashMap<>();
  static final AtomicInteger selectorReceived = new AtomicInteger();
  static final AtomicInteger plainReceived = new AtomicInteger();
  static final AtomicInteger subscriptionReceived = new AtomicInteger();
  /** What must never happen, each written down as it is seen. */
  static final List<String> violations = Collections.synchronizedList(new ArrayList<>());

  static volatile long delaySentAt = -1; // ms, just before send()
  static volatile long delayReturnedAt = -1;
  static volatile long delayDeliveryTime = -1; // JMSDeliveryTime of the message sent
  /** One entry per arrival of the delayed message: when, its JMSDeliveryTime, the delay consumer's generation. */
  static final List<String> delayArrivals = Collections.synchronizedList(new ArrayList<>());
  static volatile long lastDelayArrival = -1;

  public static void main(String[] args) throws Exception {
    JmsConnectionFactory cf = new JmsConnectionFactory(args[0]);
    String prefix = args[1];
    long drainMs = Long.parseLong(args[2]) * 1000;

    Session producerSession = producerLink.open(cf, null).createSession(false, Session.AUTO_ACKNOWLEDGE);
    Session delaySession = producerLink.connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Session selectorSession = selectorLink.open(cf, null).createSession(false, Session.CLIENT_ACKNOWLEDGE);
    Session plainSession = plainLink.open(cf, null).createSession(false, Session.CLIENT_ACKNOWLEDGE);
    Session delayConsumerSession = plainLink.connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Session durableSession = durableLink.open(cf, prefix + "-client").createSession(false, Session.CLIENT_ACKNOWLEDGE);
    Session ownSession = durableLink.connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Session otherSession = otherLink.open(cf, null).createSession(false, Session.AUTO_ACKNOWLEDGE);

    jakarta.jms.Queue colours = producerSession.createQueue(prefix + ".colours");
    jakarta.jms.Queue delayQueue = delaySession.createQueue(prefix + ".delay");
    Topic news = durableSession.createTopic("amq.topic/" + prefix + ".news");
    // Consumers first: the subscription must exist before anything is published.
    MessageConsumer selectorConsumer = selectorSession.createConsumer(colours, "colour = 'blue'");
    MessageConsumer plainConsumer = plainSession.createConsumer(colours);
    MessageConsumer delayConsumer = delayConsumerSession.createConsumer(delayQueue);
    MessageConsumer subscription = durableSession.createDurableConsumer(news, prefix + "-sub", "colour = 'blue'", true);

    List<Thread> producers = List.of(
        thread("queue producer", () -> produce(producerSession, colours, producerLink, queueSent, null, 4)),
        thread("own publisher", () -> produce(ownSession, news, durableLink, ownSent, "own", 10)),
        thread("other publisher", () -> produce(otherSession, news, otherLink, otherSent, "other", 10)));
    List<Thread> consumers = List.of(
        thread("selector consumer", () -> consumeQueue(selectorConsumer, selectorLink, selectorReceived, true, drainMs)),
        thread("plain consumer", () -> consumeQueue(plainConsumer, plainLink, plainReceived, false, drainMs)),
        thread("delay consumer", () -> consumeDelayed(delayConsumer, plainLink, drainMs)),
        thread("subscription", () -> consumeSubscription(subscription, drainMs)));
    Thread progress = new Thread(() -> {
      while (!Thread.currentThread().isInterrupted()) {
        StringBuilder restored = new StringBuilder();
        for (Link l : links) restored.append(restored.length() > 0 ? "," : "").append(l.restored.get());
        System.out.println("{\"event\":\"progress\",\"queueSent\":" + queueSent.count() + ",\"otherSent\":" + otherSent.count()
            + ",\"selectorReceived\":" + selectorReceived.get() + ",\"plainReceived\":" + plainReceived.get()
            + ",\"subscriptionReceived\":" + subscriptionReceived.get() + ",\"restored\":[" + restored + "]}");
        System.out.flush();
        try {
          Thread.sleep(200);
        } catch (InterruptedException e) {
          return;
        }
      }
    }, "progress");
    progress.setDaemon(true);
    for (Thread t : producers) t.start();
    for (Thread t : consumers) t.start();
    progress.start();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    for (String line; (line = in.readLine()) != null; ) {
      if (line.trim().equals("delay")) {
        delayRequested = true;
        MessageProducer delayed = delaySession.createProducer(delayQueue);
        delayed.setDeliveryMode(DeliveryMode.PERSISTENT);
        delayed.setDeliveryDelay(3000);
        Message m = delaySession.createTextMessage("delayed");
        delaySentAt = System.currentTimeMillis();
        delayed.send(m);
        delayReturnedAt = System.currentTimeMillis();
        delayDeliveryTime = m.getJMSDeliveryTime();
        System.out.println("{\"event\":\"delayed\",\"sentAt\":" + delaySentAt + ",\"deliveryTime\":" + delayDeliveryTime + "}");
        System.out.flush();
      }
      if (line.trim().equals("stop")) break;
    }
    stop = true;
    for (Thread t : producers) t.join();
    for (Thread t : consumers) t.join();
    progress.interrupt();
    progress.join();
    for (Link l : links) l.connection.close();
    System.out.println(result());
    System.exit(0);
  }

  interface Body { void run() throws Exception; }

  static Thread thread(String name, Body body) {
    return new Thread(() -> {
      try {
        body.run();
      } catch (Throwable e) {
        error = name + ": " + e;
      }
    }, name);
  }

  /** Blue and red in turn, persistent, synchronous: a send() that returned is acknowledged. */
  static void produce(Session session, Destination to, Link link, Sent sent, String from, int pauseMs) throws Exception {
    MessageProducer producer = session.createProducer(to);
    producer.setDeliveryMode(DeliveryMode.PERSISTENT);
    for (int seq = 0; !stop; seq++) {
      boolean blue = seq % 2 == 0;
      TextMessage m = session.createTextMessage("message " + seq);
      m.setIntProperty("seq", seq);
      m.setStringProperty("colour", blue ? "blue" : "red");
      if (from != null) m.setStringProperty("from", from);
      int restoredBefore = link.restored.get();
      boolean downBefore = link.down;
      try {
        producer.send(m);
        (blue ? sent.blue : sent.red).add(seq);
        if (link.restored.get() > 0) sent.afterFailover.incrementAndGet();
      } catch (JMSException e) {
        sent.failed.put(seq, e.toString());
      }
      // A failover while send() ran: qpid-jms sends it again, so the broker may hold two.
      if (downBefore || link.down || link.restored.get() != restoredBefore || sent.failed.containsKey(seq)) sent.inDoubt.add(seq);
      Thread.sleep(pauseMs); // a steady load, not a flood: the machine is shared
    }
  }

  /** Receives until stopped and drained; acknowledges every 5 messages (CLIENT_ACKNOWLEDGE). */
  static void consumeQueue(MessageConsumer consumer, Link link, AtomicInteger received, boolean blueOnly, long drainMs) throws Exception {
    long drainUntil = Long.MAX_VALUE;
    int unacknowledged = 0;
    Message last = null;
    for (;;) {
      if (stop && drainUntil == Long.MAX_VALUE) drainUntil = System.currentTimeMillis() + drainMs;
      if (stop && (System.currentTimeMillis() > drainUntil || queueDrained())) break;
      Message m = consumer.receive(200);
      if (m == null) continue;
      last = m;
      int seq = m.getIntProperty("seq");
      String colour = m.getStringProperty("colour");
      if (blueOnly && !"blue".equals(colour)) violations.add("the selector consumer got " + colour + " message " + seq);
      queueArrivals.computeIfAbsent(seq, k -> Collections.synchronizedList(new ArrayList<>())).add(link.arrival(m));
      received.incrementAndGet();
      if (++unacknowledged == 5) {
        m.acknowledge();
        unacknowledged = 0;
      }
    }
    if (last != null) last.acknowledge();
  }

  static void consumeSubscription(MessageConsumer consumer, long drainMs) throws Exception {
    long drainUntil = Long.MAX_VALUE;
    int unacknowledged = 0;
    Message last = null;
    for (;;) {
      if (stop && drainUntil == Long.MAX_VALUE) drainUntil = System.currentTimeMillis() + drainMs;
      if (stop && (System.currentTimeMillis() > drainUntil || missing(otherSent.blue, subscriptionArrivals).isEmpty())) break;
      // Paused from just before the kill until after the failover, so that the
      // subscription holds messages nobody has seen when the primary dies (qpid-jms drops
      // what it had prefetched when the connection fails): only the subscription's queue
      // on the new primary can deliver them.
      if (delayRequested && durableLink.restored.get() == 0) {
        Thread.sleep(20);
        continue;
      }
      Message m = consumer.receive(200);
      if (m == null) continue;
      last = m;
      int seq = m.getIntProperty("seq");
      String colour = m.getStringProperty("colour");
      String from = m.getStringProperty("from");
      if (!"blue".equals(colour) || !"other".equals(from)) {
        violations.add("the durable subscription got " + colour + " message " + seq + " from " + from + " (" + durableLink.arrival(m) + ")");
      } else {
        subscriptionArrivals.computeIfAbsent(seq, k -> Collections.synchronizedList(new ArrayList<>())).add(durableLink.arrival(m));
      }
      subscriptionReceived.incrementAndGet();
      if (++unacknowledged == 5) {
        m.acknowledge();
        unacknowledged = 0;
      }
    }
    if (last != null) last.acknowledge();
  }

  /** Records every arrival of the delayed message; after "stop", waits for it and 1.5 s more for a second copy. */
  static void consumeDelayed(MessageConsumer consumer, Link link, long drainMs) throws Exception {
    long drainUntil = Long.MAX_VALUE;
    for (;;) {
      long now = System.currentTimeMillis();
      if (stop && drainUntil == Long.MAX_VALUE) drainUntil = now + drainMs;
      boolean settled = lastDelayArrival > 0 && now > lastDelayArrival + 1500 && (delayDeliveryTime < 0 || now > delayDeliveryTime + 1500);
      if (stop && (now > drainUntil || settled || delaySentAt < 0)) break;
      Message m = consumer.receive(200);
      if (m == null) continue;
      long arrived = System.currentTimeMillis();
      lastDelayArrival = arrived;
      delayArrivals.add("{\"at\":" + arrived + ",\"deliveryTime\":" + m.getJMSDeliveryTime() + ",\"arrival\":" + Json.of(link.arrival(m)) + "}");
    }
  }

  /** Every acknowledged message of the queue arrived: blues at either consumer, reds at the plain one. */
  static boolean queueDrained() {
    return missing(queueSent.blue, queueArrivals).isEmpty() && missing(queueSent.red, queueArrivals).isEmpty();
  }

  static List<Integer> missing(Set<Integer> sent, Map<Integer, List<String>> arrivals) {
    List<Integer> missing = new ArrayList<>();
    for (int seq : sent) if (!arrivals.containsKey(seq)) missing.add(seq);
    Collections.sort(missing);
    return missing;
  }

  static String sent(Sent s) {
    return "{\"blue\":" + s.blue.size() + ",\"red\":" + s.red.size() + ",\"afterFailover\":" + s.afterFailover.get() + ",\"inDoubt\":" + new TreeSet<>(s.inDoubt)
        + ",\"failed\":" + Json.of(new ArrayList<>(new TreeMap<>(s.failed).entrySet())) + "}";
  }

  static String arrivals(Map<Integer, List<String>> arrivals) {
    StringBuilder b = new StringBuilder("{");
    new TreeMap<>(arrivals).forEach((seq, list) -> b.append(b.length() > 1 ? "," : "").append('"').append(seq).append("\":").append(Json.of(list)));
    return b.append('}').toString();
  }

  static String result() {
    List<Integer> missingQueue = missing(queueSent.blue, queueArrivals);
    missingQueue.addAll(missing(queueSent.red, queueArrivals));
    Collections.sort(missingQueue);
    StringBuilder events = new StringBuilder("{");
    for (Link l : links) events.append(events.length() > 1 ? "," : "").append(Json.of(l.name)).append(':').append(Json.of(l.events));
    return "{\"event\":\"result\",\"error\":" + Json.of(error) + ",\"violations\":" + Json.of(violations)
        + ",\"queueSent\":" + sent(queueSent) + ",\"ownSent\":" + sent(ownSent) + ",\"otherSent\":" + sent(otherSent)
        + ",\"missingQueue\":" + missingQueue + ",\"missingSubscription\":" + missing(otherSent.blue, subscriptionArrivals)
        + ",\"queueArrivals\":" + arrivals(queueArrivals) + ",\"subscriptionArrivals\":" + arrivals(subscriptionArrivals)
        + ",\"delaySentAt\":" + delaySentAt + ",\"delayReturnedAt\":" + delayReturnedAt + ",\"delayDeliveryTime\":" + delayDeliveryTime
        + ",\"delayArrivals\":[" + String.join(",", delayArrivals) + "],\"events\":" + events.append('}') + "}";
  }
}
