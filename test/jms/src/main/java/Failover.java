// A JMS producer and consumer as JMS users write them, on a failover: URL over every
// broker of a tandem cluster, run by test/jms/failover.test.ts, which kills the primary
// under this load and promotes a backup. Usage: Failover <failover-url> <queue> <drain-seconds>
//
// The producer sends persistent TextMessages (int property `seq`, 0, 1, 2, ...) with
// synchronous send(): a send() that returned is an acknowledged message. The consumer
// runs CLIENT_ACKNOWLEDGE and acknowledges every 10 messages. Each has its own
// connection, so each fails over on its own.
//
// stdout: a progress line (JSON) every 200 ms; on "stop" from stdin the producer stops,
// the consumer drains (until every acknowledged message has arrived, or drain-seconds
// pass), and the last line is the result: what was acknowledged, what arrived how often
// and in which connection generation, and which sends were in doubt (a failover
// happened while send() ran: qpid-jms then sends again, so the broker may hold two).
import jakarta.jms.*;
import org.apache.qpid.jms.JmsConnection;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.apache.qpid.jms.JmsConnectionListener;
import org.apache.qpid.jms.message.JmsInboundMessageDispatch;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.util.*;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

public class Failover {
  /** One side's connection events: interruptions counted, restores counted, down or up. */
  static final long T0 = System.nanoTime();
  static String at() { return " @" + (System.nanoTime() - T0) / 1_000_000 + "ms"; }

  static final class Link implements JmsConnectionListener {
    final AtomicInteger interrupted = new AtomicInteger();
    final AtomicInteger restored = new AtomicInteger();
    final List<String> events = Collections.synchronizedList(new ArrayList<>());
    volatile boolean down;

    public void onConnectionEstablished(URI uri) { events.add("established " + uri + at()); }
    public void onConnectionFailure(Throwable error) { events.add("failed " + error + at()); }
    public void onConnectionInterrupted(URI uri) {
      down = true;
      interrupted.incrementAndGet();
      events.add("interrupted " + uri + at());
    }
    public void onConnectionRestored(URI uri) {
      down = false;
      restored.incrementAndGet();
      events.add("restored " + uri + at());
    }
    public void onInboundMessage(JmsInboundMessageDispatch envelope) {}
    public void onSessionClosed(Session session, Throwable cause) { events.add("session closed " + cause + at()); }
    public void onConsumerClosed(MessageConsumer consumer, Throwable cause) { events.add("consumer closed " + cause + at()); }
    public void onProducerClosed(MessageProducer producer, Throwable cause) { events.add("producer closed " + cause + at()); }
  }

  static volatile boolean stop;
  static final Link producerLink = new Link();
  static final Link consumerLink = new Link();
  static final AtomicInteger acked = new AtomicInteger(); // sends that returned
  static final Set<Integer> ackedSeqs = ConcurrentHashMap.newKeySet();
  static final Set<Integer> inDoubt = ConcurrentHashMap.newKeySet();
  static final Map<Integer, String> failedSends = new ConcurrentHashMap<>();
  /**
   * seq → one entry per arrival: the consumer's interruption count then, `d` if it came
   * while the connection was down (from what qpid-jms had prefetched before), `r` if
   * JMSRedelivered.
   */
  static final Map<Integer, List<String>> arrivals = new ConcurrentHashMap<>();
  static final AtomicInteger received = new AtomicInteger();
  static volatile String producerError;
  static volatile String consumerError;

  public static void main(String[] args) throws Exception {
    JmsConnectionFactory cf = new JmsConnectionFactory(args[0]);
    String queue = args[1];
    long drainMs = Long.parseLong(args[2]) * 1000;

    Thread producer = new Thread(() -> {
      try {
        produce(cf, queue);
      } catch (Throwable e) {
        producerError = e.toString();
      }
    }, "producer");
    Thread consumer = new Thread(() -> {
      try {
        consume(cf, queue, drainMs);
      } catch (Throwable e) {
        consumerError = e.toString();
      }
    }, "consumer");
    Thread progress = new Thread(() -> {
      while (!Thread.currentThread().isInterrupted()) {
        System.out.println("{\"event\":\"progress\",\"acked\":" + acked.get() + ",\"received\":" + received.get()
            + ",\"producerInterrupted\":" + producerLink.interrupted.get() + ",\"producerRestored\":" + producerLink.restored.get()
            + ",\"consumerInterrupted\":" + consumerLink.interrupted.get() + ",\"consumerRestored\":" + consumerLink.restored.get() + "}");
        System.out.flush();
        try {
          Thread.sleep(200);
        } catch (InterruptedException e) {
          return;
        }
      }
    }, "progress");
    progress.setDaemon(true);
    producer.start();
    consumer.start();
    progress.start();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    for (String line; (line = in.readLine()) != null; ) if (line.trim().equals("stop")) break;
    stop = true;
    producer.join();
    consumer.join();
    progress.interrupt();
    progress.join();
    System.out.println(result());
    System.exit(0);
  }

  static void produce(JmsConnectionFactory cf, String queue) throws Exception {
    JmsConnection connection = (JmsConnection) cf.createConnection();
    connection.addConnectionListener(producerLink);
    try {
      connection.start();
      Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
      MessageProducer producer = session.createProducer(session.createQueue(queue));
      producer.setDeliveryMode(DeliveryMode.PERSISTENT);
      for (int seq = 0; !stop; seq++) {
        TextMessage m = session.createTextMessage("message " + seq);
        m.setIntProperty("seq", seq);
        int interruptionsBefore = producerLink.interrupted.get();
        boolean downBefore = producerLink.down;
        try {
          producer.send(m);
          ackedSeqs.add(seq);
          acked.incrementAndGet();
        } catch (JMSException e) {
          failedSends.put(seq, e.toString());
        }
        if (downBefore || producerLink.interrupted.get() != interruptionsBefore || failedSends.containsKey(seq)) inDoubt.add(seq);
        Thread.sleep(2); // a steady load, not a flood: the machine is shared
      }
    } finally {
      connection.close();
    }
  }

  static void consume(JmsConnectionFactory cf, String queue, long drainMs) throws Exception {
    JmsConnection connection = (JmsConnection) cf.createConnection();
    connection.addConnectionListener(consumerLink);
    try {
      connection.start();
      Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
      MessageConsumer consumer = session.createConsumer(session.createQueue(queue));
      long drainUntil = Long.MAX_VALUE;
      int unacknowledged = 0;
      Message last = null;
      for (;;) {
        if (stop && drainUntil == Long.MAX_VALUE) drainUntil = System.currentTimeMillis() + drainMs;
        if (stop && (System.currentTimeMillis() > drainUntil || everyAckedArrived())) break;
        Message m = consumer.receive(200);
        if (m == null) continue;
        last = m;
        int seq = m.getIntProperty("seq");
        arrivals.computeIfAbsent(seq, k -> Collections.synchronizedList(new ArrayList<>()))
            .add(consumerLink.interrupted.get() + (consumerLink.down ? "d" : "") + (m.getJMSRedelivered() ? "r" : ""));
        received.incrementAndGet();
        if (++unacknowledged == 10) {
          m.acknowledge();
          unacknowledged = 0;
        }
      }
      if (last != null) last.acknowledge();
    } finally {
      connection.close();
    }
  }

  static boolean everyAckedArrived() {
    for (int seq : ackedSeqs) if (!arrivals.containsKey(seq)) return false;
    return true;
  }

  static String result() {
    List<Integer> missing = new ArrayList<>();
    for (int seq : ackedSeqs) if (!arrivals.containsKey(seq)) missing.add(seq);
    Collections.sort(missing);
    StringBuilder dups = new StringBuilder("{");
    new TreeMap<>(arrivals).forEach((seq, list) -> {
      if (list.size() < 2) return;
      if (dups.length() > 1) dups.append(',');
      dups.append('"').append(seq).append("\":").append(json(list));
    });
    return "{\"event\":\"result\",\"acked\":" + acked.get() + ",\"received\":" + received.get()
        + ",\"distinct\":" + arrivals.size() + ",\"missing\":" + missing
        + ",\"duplicates\":" + dups.append('}') + ",\"inDoubt\":" + new TreeSet<>(inDoubt)
        + ",\"failedSends\":" + json(new ArrayList<>(new TreeMap<>(failedSends).entrySet()))
        + ",\"producerError\":" + json(producerError) + ",\"consumerError\":" + json(consumerError)
        + ",\"producerEvents\":" + json(producerLink.events) + ",\"consumerEvents\":" + json(consumerLink.events) + "}";
  }

  static String json(Object o) {
    if (o == null) return "null";
    if (o instanceof Collection<?> c) {
      StringBuilder b = new StringBuilder("[");
      for (Object x : c) b.append(b.length() > 1 ? "," : "").append(json(x));
      return b.append(']').toString();
    }
    String s = o.toString();
    StringBuilder b = new StringBuilder("\"");
    for (char ch : s.toCharArray()) {
      if (ch == '"' || ch == '\\') b.append('\\').append(ch);
      else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
      else b.append(ch);
    }
    return b.append('"').toString();
  }
}
