import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.MessageUtil;

/**
 * Kafka's own generated record classes as a filter, for any release from 4.0 on (found by name, so
 * 4.0's layouts, whose keys carry the record type as their version, work as well as 4.1+'s). Each
 * input line is a JSON object {"record_type", "name", "key", "value_version", "value"} with the key
 * and value in Kafka's JSON form (value null: a tombstone), or {"record_type", "name",
 * "value_version", "defaults": true} for the key and value built with every field at its default
 * (as GroupCoordinatorRecordSerdeTest#testDeserializeAllRecordTypes builds them). Each output line
 * adds "key_hex" and "value_hex" (the int16 record type or value version, then the message as the
 * generated writer writes it) and "kafka_key" / "kafka_value" (those bytes read back by the
 * generated readers, written by the generated JSON converters).
 */
public final class GroupRecordSerde {
    private static final String GENERATED = "org.apache.kafka.coordinator.group.generated.";

    private static Message message(String name, JsonNode json, short version, boolean defaults) throws Exception {
        if (defaults) {
            return (Message) Class.forName(GENERATED + name).getConstructor().newInstance();
        }
        return (Message) Class.forName(GENERATED + name + "JsonConverter")
            .getMethod("read", JsonNode.class, short.class).invoke(null, json, version);
    }

    private static JsonNode json(Message message, short version) throws Exception {
        return (JsonNode) Class.forName(GENERATED + message.getClass().getSimpleName() + "JsonConverter")
            .getMethod("write", message.getClass(), short.class).invoke(null, message, version);
    }

    private static byte[] write(short prefix, Message message, short version) {
        byte[] out = MessageUtil.toVersionPrefixedBytes(version, message);
        ByteBuffer.wrap(out).putShort(prefix);
        return out;
    }

    private static Message read(String name, byte[] bytes, short version) throws Exception {
        Message message = (Message) Class.forName(GENERATED + name).getConstructor().newInstance();
        message.read(new ByteBufferAccessor(ByteBuffer.wrap(bytes, 2, bytes.length - 2)), version);
        return message;
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        HexFormat hex = HexFormat.of();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            ObjectNode node = (ObjectNode) mapper.readTree(line);
            short type = (short) node.get("record_type").asInt();
            String name = node.get("name").asText();
            short valueVersion = (short) node.get("value_version").asInt();
            boolean defaults = node.has("defaults");
            // 4.0's keys are versioned by their record type, 4.1+'s are version 0
            short keyVersion = ((Message) Class.forName(GENERATED + name + "Key").getConstructor().newInstance())
                .highestSupportedVersion();
            Message key = message(name + "Key", node.get("key"), keyVersion, defaults);
            byte[] keyBytes = write(type, key, keyVersion);
            node.put("key_hex", hex.formatHex(keyBytes));
            node.set("kafka_key", json(read(name + "Key", keyBytes, keyVersion), keyVersion));
            if (defaults || !node.get("value").isNull()) {
                Message value = message(name + "Value", node.get("value"), valueVersion, defaults);
                byte[] valueBytes = write(valueVersion, value, valueVersion);
                node.put("value_hex", hex.formatHex(valueBytes));
                node.set("kafka_value", json(read(name + "Value", valueBytes, valueVersion), valueVersion));
            } else {
                node.putNull("value_hex");
                node.putNull("kafka_value");
            }
            System.out.println(mapper.writeValueAsString(node));
        }
    }
}
