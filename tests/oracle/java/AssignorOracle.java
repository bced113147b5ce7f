import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

/**
 * Differential oracle for coordinator_audit.core.client.assignors: runs Kafka's own assignors on cases read
 * from stdin and prints their assignments.
 *
 * Tokens are whitespace separated. A string is "-" (null) or "x" followed by the hex of its UTF-8
 * bytes; a list is "." (empty) or comma-separated items.
 *
 *   CASE name fresh ugen       assignor name; fresh=0 reuses the previous case's assignor instance;
 *                              ugen = generation handed to onAssignment for the U lines
 *   T topic count racks        racks: "-" or one item per partition joined by "/", each a list of
 *                              rack strings ("." for none)
 *   M member instance rack generation userData topics owned
 *                              topics: list of strings; owned: list of topic:partition
 *   END
 *
 * Output per case: "CASE i", then "A member partitions" per member (the assignor's list order) and
 * "U member userData" (subscriptionUserData after onAssignment of that assignment), or one
 * "ERR exceptionClass"; then "END".
 */
public class AssignorOracle {

    static String str(String token) {
        if (token.equals("-")) return null;
        String hex = token.substring(1);
        return new String(bytes(hex), StandardCharsets.UTF_8);
    }

    static byte[] bytes(String hex) {
        byte[] out = new byte[hex.length() / 2];
        for (int i = 0; i < out.length; i++)
            out[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        return out;
    }

    static String enc(String s) {
        if (s == null) return "-";
        return "x" + hex(s.getBytes(StandardCharsets.UTF_8));
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x));
        return sb.toString();
    }

    static List<String> items(String token) {
        List<String> out = new ArrayList<>();
        if (token.equals(".")) return out;
        Collections.addAll(out, token.split(",", -1));
        return out;
    }

    static ConsumerPartitionAssignor make(String name) {
        switch (name) {
            case "range": return new RangeAssignor();
            case "roundrobin": return new RoundRobinAssignor();
            case "sticky": return new StickyAssignor();
            case "cooperative-sticky": return new CooperativeStickyAssignor();
            default: throw new IllegalArgumentException("unknown assignor " + name);
        }
    }

    static String partitions(List<TopicPartition> tps) {
        if (tps.isEmpty()) return ".";
        StringBuilder sb = new StringBuilder();
        for (TopicPartition tp : tps) {
            if (sb.length() > 0) sb.append(',');
            sb.append(enc(tp.topic())).append(':').append(tp.partition());
        }
        return sb.toString();
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        String line;
        int caseNo = 0;
        String name = null;
        ConsumerPartitionAssignor assignor = null;
        int ugen = -1;
        List<PartitionInfo> partitionInfos = new ArrayList<>();
        Map<String, Node> nodesByRack = new LinkedHashMap<>();
        Map<String, Subscription> subscriptions = new HashMap<>();
        List<String> memberOrder = new ArrayList<>();
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) continue;
            String[] t = line.split(" ");
            switch (t[0]) {
                case "CASE": {
                    String next = t[1];
                    boolean fresh = t[2].equals("1");
                    if (fresh || assignor == null || !next.equals(name)) assignor = make(next);
                    name = next;
                    ugen = Integer.parseInt(t[3]);
                    partitionInfos = new ArrayList<>();
                    nodesByRack = new LinkedHashMap<>();
                    subscriptions = new HashMap<>();
                    memberOrder = new ArrayList<>();
                    break;
                }
                case "T": {
                    String topic = str(t[1]);
                    int count = Integer.parseInt(t[2]);
                    String[] perPartition = t[3].equals("-") ? null : t[3].split("/", -1);
                    for (int p = 0; p < count; p++) {
                        List<Node> replicas = new ArrayList<>();
                        if (perPartition != null) {
                            for (String rackToken : items(perPartition[p])) {
                                String rack = str(rackToken);
                                Node node = nodesByRack.get(rack);
                                if (node == null) {
                                    node = new Node(nodesByRack.size(), "broker" + nodesByRack.size(), 9092, rack);
                                    nodesByRack.put(rack, node);
                                }
                                replicas.add(node);
                            }
                        }
                        Node[] reps = replicas.toArray(new Node[0]);
                        Node leader = reps.length > 0 ? reps[0] : null;
                        partitionInfos.add(new PartitionInfo(topic, p, leader, reps, reps));
                    }
                    break;
                }
                case "M": {
                    String member = str(t[1]);
                    String instance = str(t[2]);
                    String rack = str(t[3]);
                    int generation = Integer.parseInt(t[4]);
                    ByteBuffer userData = t[5].equals("-") ? null : ByteBuffer.wrap(bytes(t[5].substring(1)));
                    List<String> topics = new ArrayList<>();
                    for (String s : items(t[6])) topics.add(str(s));
                    List<TopicPartition> owned = new ArrayList<>();
                    for (String s : items(t[7])) {
                        int colon = s.lastIndexOf(':');
                        owned.add(new TopicPartition(str(s.substring(0, colon)), Integer.parseInt(s.substring(colon + 1))));
                    }
                    Subscription sub = new Subscription(topics, userData, owned, generation, Optional.ofNullable(rack));
                    sub.setGroupInstanceId(Optional.ofNullable(instance));
                    subscriptions.put(member, sub);
                    memberOrder.add(member);
                    break;
                }
                case "END": {
                    out.println("CASE " + caseNo++);
                    try {
                        Cluster cluster = new Cluster("oracle", new ArrayList<>(nodesByRack.values()), partitionInfos,
                                Collections.emptySet(), Collections.emptySet());
                        Map<String, Assignment> result = assignor.assign(cluster, new GroupSubscription(subscriptions)).groupAssignment();
                        StringBuilder sb = new StringBuilder();
                        for (String member : memberOrder) {
                            Assignment a = result.get(member);
                            if (a == null) continue;
                            sb.append("A ").append(enc(member)).append(' ').append(partitions(a.partitions())).append('\n');
                            ConsumerPartitionAssignor fresh = make(name);
                            fresh.onAssignment(a, new ConsumerGroupMetadata("oracle", ugen, member, Optional.empty()));
                            ByteBuffer ud = fresh.subscriptionUserData(new HashSet<>(subscriptions.get(member).topics()));
                            byte[] udBytes = null;
                            if (ud != null) {
                                udBytes = new byte[ud.remaining()];
                                ud.get(udBytes);
                            }
                            sb.append("U ").append(enc(member)).append(' ').append(udBytes == null ? "-" : "x" + hex(udBytes)).append('\n');
                        }
                        out.print(sb);
                    } catch (Exception e) {
                        out.println("ERR " + e.getClass().getSimpleName());
                    }
                    out.println("END");
                    break;
                }
                default:
                    throw new IllegalArgumentException("bad line: " + line);
            }
        }
        out.flush();
    }
}
